// Package caserecord writes down, while kustomize's own end-to-end tests (api/krusty) run,
// what each test builds and what it expects, as JSON lines in the file named by
// $KUSTOMIZE_CASES_LOG (nothing is written when it is unset). tools/kustomize-cases.sh copies
// this file into a scratch copy of the api module (internal/caserecord) together with the
// hooks that call it; tools/kustomize-cases/collect turns the lines into the case file.
//
// Three kinds of line:
//
//	{"kind":"run", "id", "test", "dir", "files", "binary", "dirs", "options", "error"}
//	    one Kustomizer.Run: the file system as it was (paths relative to its root), the
//	    directory built, the options, and the error text when the build failed;
//	{"kind":"expect", "id", "expected", "tweaked"}
//	    the YAML a harness assertion compared the result of run `id` with;
//	{"kind":"plugin", "test", "plugin", "exec"}
//	    the test prepared a Go or exec plugin (group/version/kind).
package caserecord

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"unicode/utf8"

	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Options are the krusty.Options of a run, flattened (zero values are left out).
type Options struct {
	Reorder            string   `json:"reorder,omitempty"`
	LoadRestrictions   string   `json:"loadRestrictions,omitempty"`
	AddManagedbyLabel  bool     `json:"addManagedbyLabel,omitempty"`
	PluginRestrictions string   `json:"pluginRestrictions,omitempty"`
	BuiltinPlugins     string   `json:"builtinPlugins,omitempty"`
	FnExec             bool     `json:"fnExec,omitempty"`
	FnNetwork          bool     `json:"fnNetwork,omitempty"`
	FnMounts           []string `json:"fnMounts,omitempty"`
	FnEnv              []string `json:"fnEnv,omitempty"`
	FnAsCurrentUser    bool     `json:"fnAsCurrentUser,omitempty"`
	FnWorkingDir       string   `json:"fnWorkingDir,omitempty"`
	HelmEnabled        bool     `json:"helmEnabled,omitempty"`
	HelmCommand        string   `json:"helmCommand,omitempty"`
	HelmAPIVersions    []string `json:"helmApiVersions,omitempty"`
	HelmKubeVersion    string   `json:"helmKubeVersion,omitempty"`
}

// Named is what the recorder needs of a *testing.T.
type Named interface{ Name() string }

var (
	mu      sync.Mutex
	current Named                     // the test that made the latest harness
	runs    = map[resmap.ResMap]int{} // result of a run -> its id
	lastID  int
)

// Enter notes the test that is making a harness (tests run one at a time in this package).
func Enter(t Named) {
	mu.Lock()
	defer mu.Unlock()
	current = t
}

// Ran records one Kustomizer.Run on fSys at path.
func Ran(fSys filesys.FileSystem, path string, o Options, m resmap.ResMap, err error) {
	if os.Getenv("KUSTOMIZE_CASES_LOG") == "" {
		return
	}
	mu.Lock()
	defer mu.Unlock()
	lastID++
	root, dir := fileSystemRoot(fSys, path)
	files, binary, dirs := snapshot(fSys, root)
	line := map[string]any{
		"kind": "run", "id": lastID, "test": testName(), "dir": dir,
		"files": files, "binary": binary, "dirs": dirs, "options": o,
	}
	if err != nil {
		line["error"] = unroot(err.Error(), root)
	}
	if m != nil {
		runs[m] = lastID
	}
	write(line)
}

// Expected records the YAML a harness assertion compares m with (after the harness drops
// one leading line feed); tweaked says the actual output was rewritten before comparing.
func Expected(m resmap.ResMap, expected string, tweaked bool) {
	mu.Lock()
	defer mu.Unlock()
	id, ok := runs[m]
	if !ok || os.Getenv("KUSTOMIZE_CASES_LOG") == "" {
		return
	}
	expected = strings.TrimPrefix(expected, "\n")
	write(map[string]any{"kind": "expect", "id": id, "expected": expected, "tweaked": tweaked})
}

// Plugin records that the running test prepared a Go or exec plugin.
func Plugin(group, version, kind string, exec bool) {
	if os.Getenv("KUSTOMIZE_CASES_LOG") == "" {
		return
	}
	mu.Lock()
	defer mu.Unlock()
	write(map[string]any{
		"kind": "plugin", "test": testName(), "plugin": group + "/" + version + "/" + kind, "exec": exec,
	})
}

var testFunc = regexp.MustCompile(`^sigs\.k8s\.io/kustomize/api/krusty(?:_test)?\.(Test[^.]+)`)

// testName is the running test: the latest harness's test when it belongs to the top-level
// test found on the call stack (tests that bypass the harness leave a stale one), else the
// top-level test's name.
func testName() string {
	pcs := make([]uintptr, 256)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(1, pcs)])
	top := ""
	for {
		frame, more := frames.Next()
		if match := testFunc.FindStringSubmatch(frame.Function); match != nil {
			top = match[1]
		}
		if !more {
			break
		}
	}
	if current != nil {
		name := current.Name()
		if name == top || strings.HasPrefix(name, top+"/") {
			return name
		}
	}
	return top
}

// fileSystemRoot gives the directory whose tree is recorded and the built directory relative
// to it. In memory: "/". On disk: the test's directory under the temporary directory.
func fileSystemRoot(fSys filesys.FileSystem, path string) (root, dir string) {
	if !onDisk(fSys) {
		return "/", relative("/", filepath.Join("/", path))
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return path, ""
	}
	tmp := filepath.Clean(os.TempDir())
	if rest, ok := strings.CutPrefix(abs, tmp+string(filepath.Separator)); ok {
		first, _, _ := strings.Cut(rest, string(filepath.Separator))
		root = filepath.Join(tmp, first)
		return root, relative(root, abs)
	}
	return abs, ""
}

func onDisk(fSys filesys.FileSystem) bool {
	return fmt.Sprintf("%T", fSys) == "filesys.fsOnDisk"
}

func relative(root, path string) string {
	rel, err := filepath.Rel(root, path)
	if err != nil || rel == "." {
		return ""
	}
	return filepath.ToSlash(rel)
}

// snapshot reads every file and directory under root: text files, other files in base64,
// and the directories (so that empty ones are kept).
func snapshot(fSys filesys.FileSystem, root string) (files, binary map[string]string, dirs []string) {
	files, binary = map[string]string{}, map[string]string{}
	dirs = []string{}
	_ = fSys.Walk(root, func(path string, info fs.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		rel := relative(root, path)
		if rel == "" {
			return nil
		}
		if info.IsDir() {
			dirs = append(dirs, rel)
			return nil
		}
		content, err := fSys.ReadFile(path)
		if err != nil {
			return nil
		}
		if utf8.Valid(content) {
			files[rel] = unroot(string(content), root)
		} else {
			binary[rel] = base64.StdEncoding.EncodeToString(content)
		}
		return nil
	})
	return files, binary, dirs
}

// unroot writes an on-disk root as ${ROOT}, for the runner to put its own directory there.
func unroot(text, root string) string {
	if root == "/" {
		return text
	}
	return strings.ReplaceAll(text, root, "${ROOT}")
}

func write(line map[string]any) {
	data, err := json.Marshal(line)
	if err != nil {
		panic(err)
	}
	f, err := os.OpenFile(os.Getenv("KUSTOMIZE_CASES_LOG"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		panic(err)
	}
	defer f.Close()
	if _, err := f.Write(append(data, '\n')); err != nil {
		panic(err)
	}
}
