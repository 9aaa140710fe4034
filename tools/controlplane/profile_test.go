package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"
)

func post(t *testing.T, h http.Handler, path string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, nil))
	return rec
}

func TestProfilerStartStop(t *testing.T) {
	h := profilerHandler()
	if code := post(t, h, "/cpu/stop").Code; code != http.StatusConflict {
		t.Fatalf("stop without start: %d, want 409", code)
	}
	if code := post(t, h, "/cpu/start").Code; code != http.StatusOK {
		t.Fatalf("start: %d, want 200", code)
	}
	if code := post(t, h, "/cpu/start").Code; code != http.StatusConflict {
		t.Fatalf("second start: %d, want 409", code)
	}
	stop := post(t, h, "/cpu/stop")
	if stop.Code != http.StatusOK {
		t.Fatalf("stop: %d, want 200", stop.Code)
	}
	// pprof's format is gzip-compressed protobuf.
	if body := stop.Body.Bytes(); !bytes.HasPrefix(body, []byte{0x1f, 0x8b}) {
		t.Fatalf("stop answered %d bytes that are not a gzip'd profile", len(body))
	}
	// A second profile can follow the first.
	if code := post(t, h, "/cpu/start").Code; code != http.StatusOK {
		t.Fatalf("start after stop: %d, want 200", code)
	}
	if code := post(t, h, "/cpu/stop").Code; code != http.StatusOK {
		t.Fatalf("stop again: %d, want 200", code)
	}
}

func TestProfilerAllocs(t *testing.T) {
	rec := httptest.NewRecorder()
	profilerHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/allocs", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("allocs: %d, want 200", rec.Code)
	}
	if body := rec.Body.Bytes(); !bytes.HasPrefix(body, []byte{0x1f, 0x8b}) {
		t.Fatalf("allocs answered %d bytes that are not a gzip'd profile", len(body))
	}
}
