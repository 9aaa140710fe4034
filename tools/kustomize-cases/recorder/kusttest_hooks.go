// Copied into api/testutils/kusttest by tools/kustomize-cases.sh: the harness functions that
// name the running test, prepare plugins and compare outputs also tell the recorder (the
// originals are renamed ...Unrecorded in the scratch copy).

package kusttest_test

import (
	"testing"

	"sigs.k8s.io/kustomize/api/internal/caserecord"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// MakeHarnessWithFs notes the test, then makes the harness.
func MakeHarnessWithFs(t *testing.T, fSys filesys.FileSystem) Harness {
	t.Helper()
	caserecord.Enter(t)
	return makeHarnessWithFsUnrecorded(t, fSys)
}

// Setup notes the test, then makes its on-disk directory.
func Setup(t *testing.T) (filesys.FileSystem, filesys.ConfirmedDir) {
	t.Helper()
	caserecord.Enter(t)
	return setupUnrecorded(t)
}

// BuildGoPlugin records the plugin, then compiles it.
func (th *HarnessEnhanced) BuildGoPlugin(g, v, k string) *HarnessEnhanced {
	caserecord.Plugin(g, v, k, false)
	return th.buildGoPluginUnrecorded(g, v, k)
}

// PrepExecPlugin records the plugin, then prepares it.
func (th *HarnessEnhanced) PrepExecPlugin(g, v, k string) *HarnessEnhanced {
	caserecord.Plugin(g, v, k, true)
	return th.prepExecPluginUnrecorded(g, v, k)
}

// AssertActualEqualsExpectedWithTweak records the expectation, then compares.
func AssertActualEqualsExpectedWithTweak(
	t *testing.T, m resmap.ResMap, tweaker func([]byte) []byte, expected string) {
	t.Helper()
	caserecord.Expected(m, expected, tweaker != nil)
	assertActualEqualsExpectedWithTweakUnrecorded(t, m, tweaker, expected)
}
