package jobpod

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Meta is the metadata a Pod record keeps of a pod, in place of a
// metav1.ObjectMeta: what a sync reads of it. Labels, annotations, owner
// references and finalizers are read by Read into the Pod's own fields; the
// rest no sync reads. It is half the size of an ObjectMeta, on
// every cached pod. It implements metav1.Object, which the informer's store
// and indexer need: a getter of what it does not keep returns the zero
// value, and its setter does nothing (nothing writes to a cached pod).
type Meta struct {
	Name                       string
	Namespace                  string
	UID                        types.UID
	ResourceVersion            string
	CreationTimestamp          metav1.Time
	DeletionTimestamp          *metav1.Time
	DeletionGracePeriodSeconds *int64
}

var _ metav1.Object = &Meta{}

func (m *Meta) GetNamespace() string                   { return m.Namespace }
func (m *Meta) SetNamespace(namespace string)          { m.Namespace = namespace }
func (m *Meta) GetName() string                        { return m.Name }
func (m *Meta) SetName(name string)                    { m.Name = name }
func (m *Meta) GetUID() types.UID                      { return m.UID }
func (m *Meta) SetUID(uid types.UID)                   { m.UID = uid }
func (m *Meta) GetResourceVersion() string             { return m.ResourceVersion }
func (m *Meta) SetResourceVersion(version string)      { m.ResourceVersion = version }
func (m *Meta) GetCreationTimestamp() metav1.Time      { return m.CreationTimestamp }
func (m *Meta) SetCreationTimestamp(t metav1.Time)     { m.CreationTimestamp = t }
func (m *Meta) GetDeletionTimestamp() *metav1.Time     { return m.DeletionTimestamp }
func (m *Meta) SetDeletionTimestamp(t *metav1.Time)    { m.DeletionTimestamp = t }
func (m *Meta) GetDeletionGracePeriodSeconds() *int64  { return m.DeletionGracePeriodSeconds }
func (m *Meta) SetDeletionGracePeriodSeconds(s *int64) { m.DeletionGracePeriodSeconds = s }

// DeletionRequested is when the pod's deletion was asked for: its deletion
// timestamp less the grace period (a graceful deletion stamps the end of
// the grace period); zero while it is not being deleted.
func (m *Meta) DeletionRequested() time.Time {
	if m.DeletionTimestamp == nil {
		return time.Time{}
	}
	return deletionRequested(m.DeletionTimestamp, m.DeletionGracePeriodSeconds)
}

// Not kept.

func (*Meta) GetGenerateName() string                       { return "" }
func (*Meta) SetGenerateName(string)                        {}
func (*Meta) GetGeneration() int64                          { return 0 }
func (*Meta) SetGeneration(int64)                           {}
func (*Meta) GetSelfLink() string                           { return "" }
func (*Meta) SetSelfLink(string)                            {}
func (*Meta) GetLabels() map[string]string                  { return nil }
func (*Meta) SetLabels(map[string]string)                   {}
func (*Meta) GetAnnotations() map[string]string             { return nil }
func (*Meta) SetAnnotations(map[string]string)              {}
func (*Meta) GetFinalizers() []string                       { return nil }
func (*Meta) SetFinalizers([]string)                        {}
func (*Meta) GetOwnerReferences() []metav1.OwnerReference   { return nil }
func (*Meta) SetOwnerReferences([]metav1.OwnerReference)    {}
func (*Meta) GetManagedFields() []metav1.ManagedFieldsEntry { return nil }
func (*Meta) SetManagedFields([]metav1.ManagedFieldsEntry)  {}
