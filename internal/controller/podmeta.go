package controller

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// podMeta is the metadata the pod cache keeps of a pod, in place of a
// metav1.ObjectMeta: what a sync reads of it. Labels, annotations, owner
// references and finalizers are read by newCachedPod into cachedPod's own
// fields; the rest no sync reads. It is half the size of an ObjectMeta, on
// every cached pod. It implements metav1.Object, which the informer's store
// and indexer need: a getter of what it does not keep returns the zero
// value, and its setter does nothing (nothing writes to a cached pod).
type podMeta struct {
	Name                       string
	Namespace                  string
	UID                        types.UID
	ResourceVersion            string
	CreationTimestamp          metav1.Time
	DeletionTimestamp          *metav1.Time
	DeletionGracePeriodSeconds *int64
}

var _ metav1.Object = &podMeta{}

func (m *podMeta) GetNamespace() string                   { return m.Namespace }
func (m *podMeta) SetNamespace(namespace string)          { m.Namespace = namespace }
func (m *podMeta) GetName() string                        { return m.Name }
func (m *podMeta) SetName(name string)                    { m.Name = name }
func (m *podMeta) GetUID() types.UID                      { return m.UID }
func (m *podMeta) SetUID(uid types.UID)                   { m.UID = uid }
func (m *podMeta) GetResourceVersion() string             { return m.ResourceVersion }
func (m *podMeta) SetResourceVersion(version string)      { m.ResourceVersion = version }
func (m *podMeta) GetCreationTimestamp() metav1.Time      { return m.CreationTimestamp }
func (m *podMeta) SetCreationTimestamp(t metav1.Time)     { m.CreationTimestamp = t }
func (m *podMeta) GetDeletionTimestamp() *metav1.Time     { return m.DeletionTimestamp }
func (m *podMeta) SetDeletionTimestamp(t *metav1.Time)    { m.DeletionTimestamp = t }
func (m *podMeta) GetDeletionGracePeriodSeconds() *int64  { return m.DeletionGracePeriodSeconds }
func (m *podMeta) SetDeletionGracePeriodSeconds(s *int64) { m.DeletionGracePeriodSeconds = s }

// Not kept.

func (*podMeta) GetGenerateName() string                       { return "" }
func (*podMeta) SetGenerateName(string)                        {}
func (*podMeta) GetGeneration() int64                          { return 0 }
func (*podMeta) SetGeneration(int64)                           {}
func (*podMeta) GetSelfLink() string                           { return "" }
func (*podMeta) SetSelfLink(string)                            {}
func (*podMeta) GetLabels() map[string]string                  { return nil }
func (*podMeta) SetLabels(map[string]string)                   {}
func (*podMeta) GetAnnotations() map[string]string             { return nil }
func (*podMeta) SetAnnotations(map[string]string)              {}
func (*podMeta) GetFinalizers() []string                       { return nil }
func (*podMeta) SetFinalizers([]string)                        {}
func (*podMeta) GetOwnerReferences() []metav1.OwnerReference   { return nil }
func (*podMeta) SetOwnerReferences([]metav1.OwnerReference)    {}
func (*podMeta) GetManagedFields() []metav1.ManagedFieldsEntry { return nil }
func (*podMeta) SetManagedFields([]metav1.ManagedFieldsEntry)  {}
