// Command k8sschemas turns the Kubernetes OpenAPI v2 document
// (api/openapi-spec/swagger.json in the k8s.io/kubernetes module) into the
// JSON schemas kubeconform reads, offline, in the layout of
// yannh/kubernetes-json-schema: DIR/v<version>-standalone-strict/<kind>-<group>-<version>.json.
//
//	k8sschemas -spec swagger.json -out DIR -kube-version 1.37.2
//
// Each file is one kind's definition with the definitions it reaches
// (its $ref closure) under "definitions". As kubectl's validation does,
// every object that lists its properties rejects any other (strict);
// int-or-string and Quantity accept a string or a number; apiVersion and
// kind are pinned. Cross-field rules are not expressible and stay unchecked.
// deploy/kube/schemas.sh runs it; the output is never committed.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

const refPrefix = "#/definitions/"

type gvk struct {
	Group   string `json:"group"`
	Version string `json:"version"`
	Kind    string `json:"kind"`
}

func main() {
	spec := flag.String("spec", "", "swagger.json of the k8s.io/kubernetes module")
	out := flag.String("out", "", "directory to write into")
	version := flag.String("kube-version", "", "Kubernetes version, such as 1.37.2")
	flag.Parse()
	if err := run(*spec, *out, *version); err != nil {
		fmt.Fprintln(os.Stderr, "k8sschemas:", err)
		os.Exit(1)
	}
}

func run(spec, out, version string) error {
	if spec == "" || out == "" || version == "" {
		return errors.New("-spec, -out and -kube-version are required")
	}
	data, err := os.ReadFile(spec)
	if err != nil {
		return err
	}
	var doc struct {
		Definitions map[string]map[string]any `json:"definitions"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("%s: %w", spec, err)
	}
	if len(doc.Definitions) == 0 {
		return fmt.Errorf("%s: no definitions", spec)
	}
	dir := filepath.Join(out, "v"+strings.TrimPrefix(version, "v")+"-standalone-strict")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	names := make([]string, 0, len(doc.Definitions))
	for n := range doc.Definitions {
		names = append(names, n)
	}
	sort.Strings(names)
	written := 0
	for _, name := range names {
		def := doc.Definitions[name]
		raw, ok := def["x-kubernetes-group-version-kind"].([]any)
		if !ok {
			continue
		}
		var kinds []gvk
		b, _ := json.Marshal(raw)
		if err := json.Unmarshal(b, &kinds); err != nil {
			return fmt.Errorf("%s: x-kubernetes-group-version-kind: %w", name, err)
		}
		// Kinds every group version carries (DeleteOptions, WatchEvent)
		// are not resources anyone applies.
		if len(kinds) != 1 {
			continue
		}
		k := kinds[0]
		schema, err := standalone(doc.Definitions, name, k)
		if err != nil {
			return err
		}
		b, err = json.MarshalIndent(schema, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, fileName(k)), append(b, '\n'), 0o644); err != nil {
			return err
		}
		written++
	}
	fmt.Printf("k8sschemas: %d kinds written to %s\n", written, dir)
	return nil
}

// fileName follows kubeconform's {{ .ResourceKind }}{{ .KindSuffix }}:
// lower-case kind, then the group's first label (if any) and the version.
func fileName(k gvk) string {
	suffix := "-" + strings.ToLower(k.Version)
	if k.Group != "" {
		suffix = "-" + strings.ToLower(strings.Split(k.Group, ".")[0]) + suffix
	}
	return strings.ToLower(k.Kind) + suffix + ".json"
}

// standalone builds the schema of one kind with its $ref closure.
func standalone(defs map[string]map[string]any, root string, k gvk) (map[string]any, error) {
	closure := map[string]any{}
	var visit func(name string) error
	visit = func(name string) error {
		if _, ok := closure[name]; ok {
			return nil
		}
		d, ok := defs[name]
		if !ok {
			return fmt.Errorf("%s: $ref to missing definition %s", root, name)
		}
		c := transform(deepCopy(d), name)
		closure[name] = c
		for _, r := range refs(c, nil) {
			if err := visit(r); err != nil {
				return err
			}
		}
		return nil
	}
	if err := visit(root); err != nil {
		return nil, err
	}
	s := deepCopy(closure[root]).(map[string]any)
	delete(closure, root)
	// Refs back to the root (none today, but allowed) keep working.
	closure[root] = deepCopy(s)
	s["$schema"] = "http://json-schema.org/draft-07/schema#"
	s["definitions"] = closure
	apiVersion := k.Version
	if k.Group != "" {
		apiVersion = k.Group + "/" + k.Version
	}
	props, _ := s["properties"].(map[string]any)
	if props == nil {
		return nil, fmt.Errorf("%s: no properties", root)
	}
	props["apiVersion"] = map[string]any{"type": "string", "enum": []any{apiVersion}}
	props["kind"] = map[string]any{"type": "string", "enum": []any{k.Kind}}
	req, _ := s["required"].([]any)
	for _, f := range []string{"apiVersion", "kind"} {
		if !contains(req, f) {
			req = append(req, f)
		}
	}
	s["required"] = req
	return s, nil
}

// transform rewrites one definition into JSON schema that says what the
// API server accepts.
func transform(v any, name string) any {
	switch name {
	case "io.k8s.apimachinery.pkg.util.intstr.IntOrString":
		return map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}}}
	case "io.k8s.apimachinery.pkg.api.resource.Quantity":
		return map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "number"}}}
	}
	return strict(v)
}

// strict forbids properties an object does not list, as kubectl did.
func strict(v any) any {
	switch x := v.(type) {
	case map[string]any:
		if f, _ := x["format"].(string); f == "int-or-string" {
			return map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}}}
		}
		for k, e := range x {
			if k == "properties" {
				// The property names are data, not keywords.
				if props, ok := e.(map[string]any); ok {
					for pk, pv := range props {
						props[pk] = strict(pv)
					}
				}
				continue
			}
			x[k] = strict(e)
		}
		if _, ok := x["properties"]; ok {
			if _, set := x["additionalProperties"]; !set {
				x["additionalProperties"] = false
			}
		}
		return x
	case []any:
		for i := range x {
			x[i] = strict(x[i])
		}
	}
	return v
}

// refs lists the definitions v refers to.
func refs(v any, acc []string) []string {
	switch x := v.(type) {
	case map[string]any:
		if r, ok := x["$ref"].(string); ok && strings.HasPrefix(r, refPrefix) {
			acc = append(acc, strings.TrimPrefix(r, refPrefix))
		}
		for _, e := range x {
			acc = refs(e, acc)
		}
	case []any:
		for _, e := range x {
			acc = refs(e, acc)
		}
	}
	return acc
}

func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = deepCopy(e)
		}
		return m
	case []any:
		s := make([]any, len(x))
		for i, e := range x {
			s[i] = deepCopy(e)
		}
		return s
	}
	return v
}

func contains(s []any, v string) bool {
	for _, e := range s {
		if e == v {
			return true
		}
	}
	return false
}
