// Package compat tests, against a real kube-apiserver of whatever version
// KUBEBUILDER_ASSETS holds, the floor of the supported-versions matrix: the
// CRD installs from the oldest supported minor on and is refused below it,
// for the one reason docs/versions.md gives. `make test` runs it against the
// newest supported version and `make test-compat` one minor below the floor.
package compat

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// oldestSupportedMinor is the floor of the supported range: the CRD's rules
// that check the order of an index list call CEL's two-variable
// transformList, which kube-apiserver accepts in a new rule from 1.33 on
// (1.32 knows it only for rules already stored, for downgrades).
const oldestSupportedMinor = 33

// floorFunction is the CEL function the floor comes from.
const floorFunction = "transformList"

func TestCRDInstallsFromTheOldestSupportedMinorAndIsRefusedBelow(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run `make test` or `make test-compat`, which build the control plane and point KUBEBUILDER_ASSETS at it")
	}
	env := &envtest.Environment{}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting the control plane: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping the control plane: %v", err)
		}
	})
	version, err := harness.CheckServerVersion(cfg)
	if err != nil {
		t.Fatal(err)
	}
	minor := minorOf(t, version)
	t.Logf("kube-apiserver %s", version)

	crd := readCRD(t)
	install := func(crd *apiextensionsv1.CustomResourceDefinition) error {
		_, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{CRDs: []*apiextensionsv1.CustomResourceDefinition{crd}})
		return err
	}

	if minor >= oldestSupportedMinor {
		if err := install(crd); err != nil {
			t.Fatalf("kube-apiserver %s is supported, but refused the CRD: %v", version, err)
		}
		return
	}

	err = install(crd.DeepCopy())
	if err == nil {
		t.Fatalf("kube-apiserver %s is below the supported range, but accepted the CRD: the floor is lower than docs/versions.md says", version)
	}
	if want := "undeclared reference to '" + floorFunction + "'"; !strings.Contains(err.Error(), want) {
		t.Fatalf("kube-apiserver %s refused the CRD, but not with %q: %v", version, want, err)
	}
	t.Logf("refused, as it should be: %v", err)

	// Without the rules that call the floor's function the CRD installs, so
	// nothing else in it (or in the other rules) needs a newer server.
	stripped := crd.DeepCopy()
	removed := 0
	for i := range stripped.Spec.Versions {
		if s := stripped.Spec.Versions[i].Schema; s != nil && s.OpenAPIV3Schema != nil {
			removed += dropRulesCalling(s.OpenAPIV3Schema, floorFunction+"(")
		}
	}
	if removed == 0 {
		t.Fatalf("no rule of the CRD calls %s, yet kube-apiserver %s refused it for that", floorFunction, version)
	}
	if err := install(stripped); err != nil {
		t.Fatalf("kube-apiserver %s still refuses the CRD without its %d rules calling %s, so the floor has another reason: %v", version, removed, floorFunction, err)
	}
	t.Logf("accepted without its %d rules calling %s", removed, floorFunction)
}

// readCRD reads the generated CRD, as `kubectl apply` would send it.
func readCRD(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "config", "crd", "bases", "batch.indexedjob.dev_indexedbatchjobs.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(data, crd); err != nil {
		t.Fatalf("reading the CRD: %v", err)
	}
	return crd
}

// minorOf returns the minor of a version such as v1.33.13.
func minorOf(t *testing.T, version string) int {
	t.Helper()
	parts := strings.SplitN(strings.TrimPrefix(version, "v"), ".", 3)
	if len(parts) < 2 || parts[0] != "1" {
		t.Fatalf("unexpected kube-apiserver version %q", version)
	}
	minor, err := strconv.Atoi(parts[1])
	if err != nil {
		t.Fatalf("unexpected kube-apiserver version %q", version)
	}
	return minor
}

// dropRulesCalling removes, everywhere in s, the x-kubernetes-validations
// rules whose expression contains call, and returns how many it removed.
func dropRulesCalling(s *apiextensionsv1.JSONSchemaProps, call string) int {
	removed := 0
	var kept apiextensionsv1.ValidationRules
	for _, r := range s.XValidations {
		if strings.Contains(r.Rule, call) {
			removed++
			continue
		}
		kept = append(kept, r)
	}
	s.XValidations = kept
	for name, p := range s.Properties {
		removed += dropRulesCalling(&p, call)
		s.Properties[name] = p
	}
	if s.Items != nil && s.Items.Schema != nil {
		removed += dropRulesCalling(s.Items.Schema, call)
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		removed += dropRulesCalling(s.AdditionalProperties.Schema, call)
	}
	return removed
}
