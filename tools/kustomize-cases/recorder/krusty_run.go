// Copied into api/krusty by tools/kustomize-cases.sh: Run records every build (the original
// Run is renamed runUnrecorded in the scratch copy).

package krusty

import (
	"sigs.k8s.io/kustomize/api/internal/caserecord"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Run builds as runUnrecorded does and records the run.
func (b *Kustomizer) Run(fSys filesys.FileSystem, path string) (resmap.ResMap, error) {
	m, err := b.runUnrecorded(fSys, path)
	o := b.options
	rec := caserecord.Options{
		Reorder:           string(o.Reorder),
		LoadRestrictions:  o.LoadRestrictions.String(),
		AddManagedbyLabel: o.AddManagedbyLabel,
	}
	if pc := o.PluginConfig; pc != nil {
		rec.PluginRestrictions = pc.PluginRestrictions.String()
		rec.BuiltinPlugins = pc.BpLoadingOptions.String()
		fn := pc.FnpLoadingOptions
		rec.FnExec, rec.FnNetwork, rec.FnMounts, rec.FnEnv = fn.EnableExec, fn.Network, fn.Mounts, fn.Env
		rec.FnAsCurrentUser, rec.FnWorkingDir = fn.AsCurrentUser, fn.WorkingDir
		helm := pc.HelmConfig
		rec.HelmEnabled, rec.HelmCommand = helm.Enabled, helm.Command
		rec.HelmAPIVersions, rec.HelmKubeVersion = helm.ApiVersions, helm.KubeVersion
	}
	caserecord.Ran(fSys, path, rec, m, err)
	return m, err
}
