package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/indexed-batch-job/indexed-batch-job/test/harness/manifests"
)

// flowControlFile holds the operator's PriorityLevelConfiguration and the
// FlowSchema that puts its ServiceAccount there, as config/flowcontrol and
// the chart's flowControl.enabled install them.
var flowControlFile = filepath.Join("config", "flowcontrol", "flowcontrol.yaml")

// flowControlObjects are the objects of a multi-document YAML file.
func flowControlObjects(data []byte) ([]*unstructured.Unstructured, error) {
	docs, err := manifests.Documents(data)
	if err != nil {
		return nil, err
	}
	objs := make([]*unstructured.Unstructured, 0, len(docs))
	for _, doc := range docs {
		u := &unstructured.Unstructured{}
		if err := utilyaml.Unmarshal(doc, &u.Object); err != nil {
			return nil, err
		}
		objs = append(objs, u)
	}
	return objs, nil
}

// installFlowSchema creates the shipped objects of flowControlFile (with
// -flowschema) and waits until API Priority and Fairness has taken up the
// FlowSchema: its Dangling condition False, its priority level found.
func (b *bench) installFlowSchema(ctx context.Context) error {
	data, err := os.ReadFile(flowControlFile)
	if err != nil {
		return err
	}
	objs, err := flowControlObjects(data)
	if err != nil {
		return fmt.Errorf("%s: %w", flowControlFile, err)
	}
	var schema string
	for _, o := range objs {
		if err := b.cl.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %s %s: %w", o.GetKind(), o.GetName(), err)
		}
		if o.GetKind() == "FlowSchema" {
			schema = o.GetName()
		}
	}
	if schema == "" {
		return fmt.Errorf("%s has no FlowSchema", flowControlFile)
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		fs := &flowcontrolv1.FlowSchema{}
		if err := b.cl.Get(ctx, client.ObjectKey{Name: schema}, fs); err != nil {
			return false, nil //nolint:nilerr // not served yet: poll again
		}
		for _, c := range fs.Status.Conditions {
			if c.Type == flowcontrolv1.FlowSchemaConditionDangling {
				return c.Status == flowcontrolv1.ConditionFalse, nil
			}
		}
		return false, nil
	})
}
