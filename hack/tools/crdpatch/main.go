// Command crdpatch adds to the generated IndexedBatchJob CRD the validation
// that controller-gen cannot place, because it belongs on batch/v1 types this
// API reuses rather than copies and markers can only
// be written on our own types: list bounds, enums and per-item CEL rules of
// podFailurePolicy's onExitCodes and onPodConditions and of successPolicy,
// and the template immutability rule,
// which is generated from the PodSpec schema so that every field but the
// scheduling directives stays immutable. `make manifests` runs it after
// controller-gen; running it twice gives the same file.
package main

import (
	"bytes"
	"fmt"
	"os"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

type obj = map[string]any

// indexesFormat is the syntax of a list of indexes (successPolicy
// succeededIndexes, spec.indexes): comma-separated indexes and ranges such
// as "0,2-5".
const indexesFormat = `^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$`

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: crdpatch <crd.yaml>")
		os.Exit(2)
	}
	if err := patchFile(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "crdpatch:", err)
		os.Exit(1)
	}
}

func patchFile(path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var crd obj
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		return err
	}
	versions, _ := get(crd, "spec", "versions").([]any)
	if len(versions) == 0 {
		return fmt.Errorf("%s: no versions", path)
	}
	for _, v := range versions {
		spec, ok := get(v.(obj), "schema", "openAPIV3Schema", "properties", "spec").(obj)
		if !ok {
			return fmt.Errorf("%s: no spec schema", path)
		}
		if err := patchSpec(spec); err != nil {
			return err
		}
	}
	out, err := yaml.Marshal(crd)
	if err != nil {
		return err
	}
	return os.WriteFile(path, append([]byte("---\n"), bytes.TrimPrefix(out, []byte("---\n"))...), 0o644)
}

// get walks nested maps; it returns nil when a key is missing.
func get(o obj, keys ...string) any {
	var cur any = o
	for _, k := range keys {
		m, ok := cur.(obj)
		if !ok {
			return nil
		}
		cur = m[k]
	}
	return cur
}

func mustObj(o obj, keys ...string) obj {
	m, ok := get(o, keys...).(obj)
	if !ok {
		panic(fmt.Sprintf("schema has no object at %s", strings.Join(keys, ".")))
	}
	return m
}

type rule struct{ rule, message string }

func validations(rules ...rule) []any {
	out := make([]any, 0, len(rules))
	for _, r := range rules {
		out = append(out, obj{"rule": r.rule, "message": r.message})
	}
	return out
}

func patchSpec(spec obj) error {
	props := mustObj(spec, "properties")

	// podFailurePolicy: bounds and rules of upstream's ValidateJobSpec on the
	// batch/v1 types its rules reuse (the policy and rule types are this
	// API's own, with their rules as markers).
	ruleProps := mustObj(props, "podFailurePolicy", "properties", "rules", "items", "properties")
	onExit := mustObj(ruleProps, "onExitCodes")
	exitProps := mustObj(onExit, "properties")
	mustObj(exitProps, "operator")["enum"] = []any{"In", "NotIn"}
	mustObj(exitProps, "containerName")["maxLength"] = 63
	values := mustObj(exitProps, "values")
	values["minItems"] = 1
	values["maxItems"] = 255
	onExit["x-kubernetes-validations"] = validations(
		rule{"self.values.isSorted()", "onExitCodes.values must be sorted in ascending order"},
		rule{"self.operator != 'In' || !(0 in self.values)", "onExitCodes.values must not contain 0 with operator In: a zero exit code never counts as a failure"},
	)
	onCond := mustObj(ruleProps, "onPodConditions")
	onCond["maxItems"] = 20
	condProps := mustObj(onCond, "items", "properties")
	mustObj(condProps, "status")["enum"] = []any{"True", "False", "Unknown"}
	mustObj(condProps, "type")["maxLength"] = 316
	mustObj(condProps, "type")["minLength"] = 1

	// successPolicy: bounds and formats of upstream's validateSuccessPolicy.
	spRules := mustObj(props, "successPolicy", "properties", "rules")
	spRules["minItems"] = 1
	spRules["maxItems"] = 20
	spRule := mustObj(spRules, "items")
	spRule["x-kubernetes-validations"] = validations(
		rule{"has(self.succeededIndexes) || has(self.succeededCount)", "each successPolicy rule must set succeededIndexes, succeededCount or both"},
	)
	spProps := mustObj(spRule, "properties")
	mustObj(spProps, "succeededCount")["minimum"] = 0
	indexes := mustObj(spProps, "succeededIndexes")
	// Upstream allows 64 KiB. Checking the order of the indexes costs CEL one
	// step per number, and with 20 rules of 64 KiB the estimated cost is ten
	// times the budget of a rule, so the CRD would not install; 4 KiB (hundreds
	// of ranges) keeps the order rule within it.
	indexes["maxLength"] = 4096
	indexes["x-kubernetes-validations"] = indexListRules("succeededIndexes")
	// spec.indexes is one field, not twenty: it affords a longer list.
	mustObj(props, "indexes")["x-kubernetes-validations"] = indexListRules("indexes")

	// A template without a spec cannot run, and the rules on spec read
	// template.spec without has(): require it, as upstream's pod validation does.
	mustObj(props, "template")["required"] = []any{"spec"}

	// The pod template's field descriptions are the Pod API's own, which
	// `kubectl explain pod.spec` already gives, and they are most of the CRD:
	// with them its JSON exceeds the 256 KiB that client-side `kubectl apply`
	// can store in its last-applied annotation. Keep the descriptions of the
	// template, its metadata and spec themselves, drop those of their fields.
	for _, part := range mustObj(props, "template", "properties") {
		for _, field := range mustObj(part.(obj), "properties") {
			dropDescriptions(field.(obj))
		}
	}

	// Rules across fields, which must live on spec.
	spec["x-kubernetes-validations"] = append(existing(spec),
		validations(
			rule{"!has(self.successPolicy) || self.successPolicy.rules.all(r, !has(r.succeededIndexes) || r.succeededIndexes.findAll('[0-9]+').all(n, size(n) <= 10 && int(n) < self.completions))",
				"successPolicy rules' succeededIndexes must be within 0 and completions-1"},
			rule{"!has(self.indexes) || self.indexes.findAll('[0-9]+').all(n, size(n) <= 10 && int(n) < self.completions)",
				"indexes must be within 0 and completions-1"},
			templateRule(props),
			containerListRule("containers"),
			containerListRule("initContainers"),
		)...)

	return nil
}

// fieldEqual is a CEL expression true when an optional field is unset in
// both objects or set to the same value in both.
func fieldEqual(newPath, oldPath, hasNew, hasOld string) string {
	return fmt.Sprintf("(%[3]s ? %[4]s && %[1]s == %[2]s : !%[4]s)", newPath, oldPath, hasNew, hasOld)
}

// dropDescriptions removes the description of a schema and of every schema
// nested in it. It walks only the keywords that hold schemas, so a property
// that happened to be named "description" would keep its schema.
func dropDescriptions(schema obj) {
	delete(schema, "description")
	for _, key := range []string{"items", "additionalProperties", "not"} {
		if sub, ok := schema[key].(obj); ok {
			dropDescriptions(sub)
		}
	}
	for _, key := range []string{"properties", "patternProperties", "definitions"} {
		if subs, ok := schema[key].(obj); ok {
			for _, sub := range subs {
				if sub, ok := sub.(obj); ok {
					dropDescriptions(sub)
				}
			}
		}
	}
	for _, key := range []string{"allOf", "anyOf", "oneOf"} {
		if subs, ok := schema[key].([]any); ok {
			for _, sub := range subs {
				if sub, ok := sub.(obj); ok {
					dropDescriptions(sub)
				}
			}
		}
	}
}

// indexListRules are the rules of a list of indexes in the syntax of
// status.completedIndexes; field names it in the messages.
func indexListRules(field string) []any {
	return validations(
		rule{`self.matches('` + indexesFormat + `')`, field + ` must be comma-separated indexes or ranges such as "0,2-5"`},
		// Integers a_0 < a_1 < ... are strictly increasing exactly when
		// a_i - i never decreases, which isSorted can check in one pass.
		// Digit runs longer than 10 are out of range (the range rule on spec
		// says so), and would overflow int().
		rule{`!self.matches('` + indexesFormat + `') || self.matches('[0-9]{11}') || self.findAll('[0-9]+').transformList(i, n, int(n) - i).isSorted()`,
			field + ` must be in increasing order, without repeated indexes or overlapping ranges, and each range must go from the lower index to the higher`},
	)
}

func existing(o obj) []any {
	v, _ := o["x-kubernetes-validations"].([]any)
	// Drop rules this program added before, so that it is idempotent.
	var out []any
	for _, r := range v {
		m := r.(obj)
		if msg, _ := m["message"].(string); strings.HasPrefix(msg, "successPolicy rules' succeededIndexes") ||
			strings.HasPrefix(msg, "indexes must be within") || strings.HasPrefix(msg, "template is immutable") ||
			strings.HasPrefix(msg, "template.spec.containers ") || strings.HasPrefix(msg, "template.spec.initContainers ") {
			continue
		}
		out = append(out, r)
	}
	return out
}

// mutableWhileSuspended lists the template fields upstream lets a suspended
// Job change (its "mutable scheduling directives"), and the container
// lists, whose containers' resources may change then too (KEP-5440), under
// containerListRule.
var mutableWhileSuspended = map[string]bool{
	"metadata.labels":      true,
	"metadata.annotations": true,
	"spec.nodeSelector":    true,
	"spec.affinity":        true,
	"spec.tolerations":     true,
	"spec.schedulingGates": true,
	"spec.containers":      true,
	"spec.initContainers":  true,
}

// containerListRule builds the transition rule of a container list of the
// template: it may change only while the job is suspended, and then keep
// its containers' names and order. That a container changes in nothing
// but its resources is the validating webhook's to judge: a CEL rule that
// compares each field of each container costs more than the API server
// allows a CRD's rules (the lists and their strings are unbounded), where
// the names alone stay well within it.
func containerListRule(list string) rule {
	p := "template.spec." + list
	newList, oldList := "self."+p, "oldSelf."+p
	return rule{
		rule: fmt.Sprintf("(has(%[1]s) ? has(%[2]s) && %[1]s == %[2]s : !has(%[2]s)) || "+
			"(has(oldSelf.suspend) && oldSelf.suspend && has(%[1]s) && has(%[2]s) && %[1]s.map(c, c.name) == %[2]s.map(c, c.name))",
			newList, oldList),
		message: p + " may change only while the job is suspended, and then only in their resources: the containers, their names and their order stay",
	}
}

// templateRule builds a transition rule: the template may change only while
// the job is suspended, and then only in its scheduling directives. It
// compares every other field of the template's metadata and spec one by one,
// the only way CEL can express "equal except these fields".
func templateRule(specProps obj) rule {
	tmpl := mustObj(specProps, "template", "properties")
	var terms []string
	for _, part := range []string{"metadata", "spec"} {
		fields := mustObj(tmpl, part, "properties")
		names := make([]string, 0, len(fields))
		for name := range fields {
			if !mutableWhileSuspended[part+"."+name] {
				names = append(names, name)
			}
		}
		sort.Strings(names)
		for _, name := range names {
			// template.metadata is optional, so its fields are guarded by
			// has(...metadata): has() of a field of a missing object is an
			// error in CEL, not false. template.spec is required.
			p := "template." + part + "." + celName(name)
			hasNew, hasOld := "has(self."+p+")", "has(oldSelf."+p+")"
			if part == "metadata" {
				hasNew = "(has(self.template.metadata) && " + hasNew + ")"
				hasOld = "(has(oldSelf.template.metadata) && " + hasOld + ")"
			}
			terms = append(terms, fieldEqual("self."+p, "oldSelf."+p, hasNew, hasOld))
		}
	}
	return rule{
		rule:    "self.template == oldSelf.template || (has(oldSelf.suspend) && oldSelf.suspend && " + strings.Join(terms, " && ") + ")",
		message: "template is immutable, except for labels, annotations, nodeSelector, affinity, tolerations, schedulingGates and container resources while the job is suspended",
	}
}

// celReserved are the CEL keywords the API server escapes as __keyword__ when
// they are property names (metadata.namespace is one).
var celReserved = map[string]bool{
	"true": true, "false": true, "null": true, "in": true, "as": true, "break": true, "const": true,
	"continue": true, "else": true, "for": true, "function": true, "if": true, "import": true,
	"let": true, "loop": true, "package": true, "namespace": true, "return": true, "var": true,
	"void": true, "while": true,
}

// celName is how a CEL expression names the property name.
func celName(name string) string {
	if celReserved[name] {
		return "__" + name + "__"
	}
	return name
}
