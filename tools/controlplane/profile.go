package main

import (
	"bytes"
	"net"
	"net/http"
	"runtime/pprof"
	"sync"

	"k8s.io/klog/v2"
)

// serveProfiler serves a CPU profile of the whole process (etcd, apiserver, controllers, fake
// kubelet) over a window its caller chooses: POST /cpu/start begins one, POST /cpu/stop ends it
// and answers with the pprof data (read with `go tool pprof`). The scale benchmark wraps each
// phase in start/stop, which the stock /debug/pprof/profile?seconds=N cannot do for a phase of
// unknown length. GET /allocs answers with the allocation profile so far (cumulative since the
// process started, sampled by the runtime): two of them bracketing a phase, read with
// `go tool pprof -sample_index=alloc_space -base`, say what the phase allocated and where.
// Only on loopback and only when PALLET_CONTROLPLANE_PROFILE names an address.
func serveProfiler(addr string) error {
	listener, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	klog.InfoS("profiler listening", "addr", listener.Addr().String())
	go func() {
		if err := http.Serve(listener, profilerHandler()); err != nil {
			klog.ErrorS(err, "profiler stopped")
		}
	}()
	return nil
}

// profilerHandler serves /cpu/start and /cpu/stop (one CPU profile at a time) and /allocs.
func profilerHandler() http.Handler {
	var (
		mu  sync.Mutex
		buf *bytes.Buffer
	)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /cpu/start", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if buf != nil {
			http.Error(w, "a profile is already running", http.StatusConflict)
			return
		}
		next := &bytes.Buffer{}
		if err := pprof.StartCPUProfile(next); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		buf = next
	})
	mux.HandleFunc("POST /cpu/stop", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if buf == nil {
			http.Error(w, "no profile is running", http.StatusConflict)
			return
		}
		pprof.StopCPUProfile()
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(buf.Bytes())
		buf = nil
	})
	mux.HandleFunc("GET /allocs", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		if err := pprof.Lookup("allocs").WriteTo(w, 0); err != nil {
			klog.ErrorS(err, "writing the allocation profile")
		}
	})
	return mux
}
