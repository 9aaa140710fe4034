// Command collect turns what the recorder wrote while kustomize's end-to-end tests ran (JSON
// lines, see recorder/caserecord.go) and the tests' outcomes (`go tool test2json` events) into
// the case file that formats/tests/kustomize_krusty.rs reads.
//
//	go run ./collect STEPS.jsonl EVENTS.json SOURCE OUT.json
//
// A case is one build: a test that builds more than once gives TestName@1, TestName@2, ...
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
)

type step struct {
	Kind     string            `json:"kind"`
	ID       int               `json:"id"`
	Test     string            `json:"test"`
	Dir      string            `json:"dir"`
	Files    map[string]string `json:"files"`
	Binary   map[string]string `json:"binary"`
	Dirs     []string          `json:"dirs"`
	Options  map[string]any    `json:"options"`
	Error    *string           `json:"error"`
	Expected *string           `json:"expected"`
	Tweaked  bool              `json:"tweaked"`
	Plugin   string            `json:"plugin"`
	Exec     bool              `json:"exec"`
}

type event struct {
	Action string `json:"Action"`
	Test   string `json:"Test"`
	Output string `json:"Output"`
}

// Case is one recorded build with what its test expected.
type Case struct {
	Name     string            `json:"name"`
	Test     string            `json:"test"`
	Outcome  string            `json:"outcome"`
	Dir      string            `json:"dir"`
	Files    map[string]string `json:"files"`
	Binary   map[string]string `json:"binary,omitempty"`
	Dirs     []string          `json:"dirs"`
	Options  map[string]any    `json:"options"`
	Plugins  []string          `json:"plugins,omitempty"`
	Expected *string           `json:"expected,omitempty"`
	Tweaked  bool              `json:"tweaked,omitempty"`
	Error    *string           `json:"error,omitempty"`
}

// Unbuilt is a test that recorded no build, with its outcome and first message.
type Unbuilt struct {
	Test    string `json:"test"`
	Outcome string `json:"outcome"`
	Note    string `json:"note,omitempty"`
}

func main() {
	if len(os.Args) != 5 {
		fmt.Fprintln(os.Stderr, "usage: collect STEPS.jsonl EVENTS.json SOURCE OUT.json")
		os.Exit(2)
	}
	steps, err := readLines[step](os.Args[1])
	check(err)
	events, err := readLines[event](os.Args[2])
	check(err)

	outcome, note, order := map[string]string{}, map[string]string{}, []string{}
	for _, e := range events {
		if e.Test == "" {
			continue
		}
		switch e.Action {
		case "run":
			order = append(order, e.Test)
		case "pass", "fail", "skip":
			outcome[e.Test] = e.Action
		case "output":
			text := strings.TrimSpace(e.Output)
			if note[e.Test] == "" && strings.Contains(text, ".go:") {
				note[e.Test] = text
			}
		}
	}

	byID, plugins, runsOf := map[int]*Case{}, map[string][]string{}, map[string][]*Case{}
	var cases []*Case
	for _, s := range steps {
		switch s.Kind {
		case "run":
			c := &Case{Test: s.Test, Dir: s.Dir, Files: s.Files, Binary: s.Binary, Dirs: s.Dirs,
				Options: s.Options, Error: s.Error}
			byID[s.ID] = c
			runsOf[s.Test] = append(runsOf[s.Test], c)
			cases = append(cases, c)
		case "expect":
			if c := byID[s.ID]; c != nil && c.Expected == nil {
				c.Expected, c.Tweaked = s.Expected, s.Tweaked
			}
		case "plugin":
			plugins[s.Test] = append(plugins[s.Test], s.Plugin)
		}
	}
	for test, runs := range runsOf {
		for i, c := range runs {
			c.Name = test
			if len(runs) > 1 {
				c.Name = fmt.Sprintf("%s@%d", test, i+1)
			}
			c.Outcome = outcomeOf(outcome, test)
			c.Plugins = plugins[test]
		}
	}

	// Subtests of a table kept in a Go map run in a random order: the file is sorted by name.
	sort.SliceStable(cases, func(i, j int) bool { return cases[i].Name < cases[j].Name })

	var unbuilt []Unbuilt
	for i, test := range order {
		isParent := i+1 < len(order) && strings.HasPrefix(order[i+1], test+"/")
		if len(runsOf[test]) == 0 && !isParent {
			unbuilt = append(unbuilt, Unbuilt{Test: test, Outcome: outcome[test], Note: note[test]})
		}
	}

	out, err := json.MarshalIndent(map[string]any{
		"source": os.Args[3], "cases": cases, "unbuilt": unbuilt,
	}, "", " ")
	check(err)
	check(os.WriteFile(os.Args[4], append(out, '\n'), 0o644))
	fmt.Fprintf(os.Stderr, "%d cases from %d tests, %d tests without a build\n",
		len(cases), len(runsOf), len(unbuilt))
}

// outcomeOf is the test's outcome, or its nearest parent's when it has none of its own.
func outcomeOf(outcome map[string]string, test string) string {
	for name := test; ; {
		if o, ok := outcome[name]; ok {
			return o
		}
		i := strings.LastIndex(name, "/")
		if i < 0 {
			return "unknown"
		}
		name = name[:i]
	}
}

func readLines[T any](path string) ([]T, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []T
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 1<<20), 1<<28)
	for scanner.Scan() {
		var v T
		if json.Unmarshal(scanner.Bytes(), &v) == nil {
			out = append(out, v)
		}
	}
	return out, scanner.Err()
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "collect:", err)
		os.Exit(1)
	}
}
