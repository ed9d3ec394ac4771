package webhook

import (
	"os"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"

	"github.com/indexed-batch-job/indexed-batch-job/internal/kueue"
)

// TestValidatingWebhookIsSentWhatKueuesRulesJudge checks that the
// validating webhook's matchCondition (generated into config/webhook from
// the marker in webhook.go) names every label and annotation whose change
// the Kueue integration's rules judge, so that an update changing one is
// not let through unjudged.
func TestValidatingWebhookIsSentWhatKueuesRulesJudge(t *testing.T) {
	raw, err := os.ReadFile("../../config/webhook/manifests.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var expression string
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		var c admissionv1.ValidatingWebhookConfiguration
		if err := yaml.Unmarshal([]byte(doc), &c); err != nil {
			t.Fatal(err)
		}
		if c.Kind != "ValidatingWebhookConfiguration" {
			continue
		}
		for _, w := range c.Webhooks {
			for _, m := range w.MatchConditions {
				expression += m.Expression
			}
		}
	}
	if expression == "" {
		t.Fatal("no matchCondition in the validating webhook configuration")
	}
	for _, list := range []struct {
		field string
		keys  []string
	}{{"labels", kueue.JudgedLabels}, {"annotations", kueue.JudgedAnnotations}} {
		for _, key := range list.keys {
			if !strings.Contains(expression, "'"+key+"'") {
				t.Errorf("the matchCondition does not send a change of the %s %s to the webhook", list.field, key)
			}
		}
	}
	if !strings.Contains(expression, "'"+kueue.MinParallelismAnnotation+"' in oldObject.metadata.annotations && object.spec.parallelism") {
		t.Errorf("the matchCondition does not send a change of the parallelism of a job with %s", kueue.MinParallelismAnnotation)
	}
}
