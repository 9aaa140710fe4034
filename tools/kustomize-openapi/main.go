// Command kustomize-openapi writes the schema knowledge the kustomize format needs, taken from
// the Kubernetes OpenAPI document (v1.21.2) that kustomize v5.5.0 embeds through
// sigs.k8s.io/kustomize/kyaml v0.18.1, as a compact JSON document:
//
//   - per definition: its fields (properties, additionalProperties, items, $ref), whether it is
//     an array, the strategic merge extensions (x-kubernetes-patch-strategy,
//     x-kubernetes-patch-merge-key, x-kubernetes-list-map-keys) and the group/version/kinds it
//     is the schema of;
//   - per kind: whether it is namespaced, derived from the API paths as kyaml derives it;
//   - the namespace-scope table kyaml consults before any schema;
//   - the same for the Kustomization API schema kyaml always loads after the Kubernetes one.
//
// The document is read exactly as kyaml reads it (protobuf, then gnostic's conversion to a
// swagger document), so what the Rust side sees is what kustomize sees.
//
// Usage (from this directory): go run . > ../../formats/src/kustomize/openapi-v1.21.2.json
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	_ "unsafe" // go:linkname, to read kyaml's namespace-scope table

	openapi_v2 "github.com/google/gnostic-models/openapiv2"
	"google.golang.org/protobuf/proto"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"sigs.k8s.io/kustomize/kyaml/openapi/kubernetesapi"
	"sigs.k8s.io/kustomize/kyaml/openapi/kustomizationapi"
	"sigs.k8s.io/kustomize/kyaml/yaml"

	_ "sigs.k8s.io/kustomize/kyaml/openapi"
)

// The table kyaml answers namespace-scope questions from before it looks at any schema.
//
//go:linkname precomputedIsNamespaceScoped sigs.k8s.io/kustomize/kyaml/openapi.precomputedIsNamespaceScoped
var precomputedIsNamespaceScoped map[yaml.TypeMeta]bool

// node is one schema in the compact form.
type node struct {
	Ref         string           `json:"ref,omitempty"`
	Array       bool             `json:"array,omitempty"`
	Props       map[string]*node `json:"props,omitempty"`
	Additional  *node            `json:"additional,omitempty"`
	Items       *node            `json:"items,omitempty"`
	Strategy    *string          `json:"strategy,omitempty"`
	MergeKey    *string          `json:"mergeKey,omitempty"`
	ListMapKeys []string         `json:"listMapKeys,omitempty"`
	// Gvks lists [apiVersion, kind] pairs (definitions only).
	Gvks [][2]string `json:"gvks,omitempty"`
}

// document is one OpenAPI document in the compact form.
type document struct {
	Definitions map[string]*node `json:"definitions"`
	// Scopes lists [apiVersion, kind, "namespaced"|"cluster"] from the API paths.
	Scopes [][3]string `json:"scopes"`
}

type output struct {
	Source        string      `json:"source"`
	Kubernetes    document    `json:"kubernetes"`
	Kustomization document    `json:"kustomization"`
	Precomputed   [][3]string `json:"precomputed"`
}

func compact(s *spec.Schema) *node {
	n := &node{Ref: s.Ref.String()}
	n.Array = len(s.Type) == 1 && s.Type[0] == "array"
	if len(s.Properties) > 0 {
		n.Props = map[string]*node{}
		for name := range s.Properties {
			p := s.Properties[name]
			n.Props[name] = compact(&p)
		}
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		n.Additional = compact(s.AdditionalProperties.Schema)
	}
	if s.Items != nil && s.Items.Schema != nil {
		n.Items = compact(s.Items.Schema)
	}
	if v, ok := s.Extensions["x-kubernetes-patch-strategy"].(string); ok {
		n.Strategy = &v
	}
	if v, ok := s.Extensions["x-kubernetes-patch-merge-key"].(string); ok {
		n.MergeKey = &v
	}
	if list, ok := s.Extensions["x-kubernetes-list-map-keys"].([]interface{}); ok {
		for _, k := range list {
			if ks, ok := k.(string); ok {
				n.ListMapKeys = append(n.ListMapKeys, ks)
			}
		}
	}
	if exts, ok := s.Extensions["x-kubernetes-group-version-kind"].([]interface{}); ok {
		for _, e := range exts {
			if tm, ok := typeMeta(e); ok {
				n.Gvks = append(n.Gvks, [2]string{tm.APIVersion, tm.Kind})
			}
		}
	}
	return n
}

// typeMeta reads one x-kubernetes-group-version-kind entry as kyaml does.
func typeMeta(ext interface{}) (yaml.TypeMeta, bool) {
	m, ok := ext.(map[string]interface{})
	if !ok {
		return yaml.TypeMeta{}, false
	}
	version, _ := m["version"].(string)
	kind, _ := m["kind"].(string)
	if g, ok := m["group"].(string); ok && g != "" {
		version = g + "/" + version
	}
	return yaml.TypeMeta{APIVersion: version, Kind: kind}, true
}

func scope(namespaced bool) string {
	if namespaced {
		return "namespaced"
	}
	return "cluster"
}

// scopes derives namespace scope from the API paths: a kind served under
// namespaces/{namespace} is namespaced, one served only elsewhere is cluster-scoped.
func scopes(paths *spec.Paths) [][3]string {
	found := map[yaml.TypeMeta]bool{}
	if paths != nil {
		for path, item := range paths.Paths {
			if item.Get == nil {
				continue
			}
			tm, ok := typeMeta(item.Get.Extensions["x-kubernetes-group-version-kind"])
			if !ok {
				continue
			}
			if strings.Contains(path, "namespaces/{namespace}") {
				found[tm] = true
			} else if _, seen := found[tm]; !seen {
				found[tm] = false
			}
		}
	}
	return sortedScopes(found)
}

func sortedScopes(m map[yaml.TypeMeta]bool) [][3]string {
	out := [][3]string{}
	for tm, ns := range m {
		out = append(out, [3]string{tm.APIVersion, tm.Kind, scope(ns)})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i][0] != out[j][0] {
			return out[i][0] < out[j][0]
		}
		return out[i][1] < out[j][1]
	})
	return out
}

func convert(sw *spec.Swagger) document {
	doc := document{Definitions: map[string]*node{}, Scopes: scopes(sw.Paths)}
	for name := range sw.Definitions {
		d := sw.Definitions[name]
		doc.Definitions[name] = compact(&d)
	}
	return doc
}

func run() error {
	version := kubernetesapi.DefaultOpenAPI
	asset := "kubernetesapi/" + strings.ReplaceAll(version, ".", "_") + "/swagger.pb"
	gnostic := &openapi_v2.Document{}
	if err := proto.Unmarshal(kubernetesapi.OpenAPIMustAsset[version](asset), gnostic); err != nil {
		return err
	}
	var kube spec.Swagger
	if _, err := kube.FromGnostic(gnostic); err != nil {
		return err
	}
	var kust spec.Swagger
	if err := kust.UnmarshalJSON(kustomizationapi.MustAsset("kustomizationapi/swagger.json")); err != nil {
		return err
	}
	out := output{
		Source: "Kubernetes OpenAPI " + version +
			" as embedded in sigs.k8s.io/kustomize/kyaml v0.18.1 (Apache-2.0)",
		Kubernetes:    convert(&kube),
		Kustomization: convert(&kust),
		Precomputed:   sortedScopes(precomputedIsNamespaceScoped),
	}
	enc := json.NewEncoder(os.Stdout)
	return enc.Encode(out)
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
