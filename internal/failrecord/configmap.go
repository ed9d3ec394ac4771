package failrecord

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ShardName is the name of the ConfigMap that holds shard n of the
// record of the job named job: <job>-failures-<n>.
func ShardName(job string, n int) string { return fmt.Sprintf("%s-failures-%d", job, n) }

// ShardOfConfigMap is the shard number of a ConfigMap of the record of
// the job (its name and UID); ok is false for one the job does not
// control or whose name is not a shard's as ShardName writes it (no sign,
// no leading zero). Anyone who may create ConfigMaps in the namespace can
// give one the record's label; the job's controller reference and the
// name are what the operator writes.
func ShardOfConfigMap(job string, uid types.UID, cm *corev1.ConfigMap) (int, bool) {
	if ref := metav1.GetControllerOf(cm); ref == nil || ref.UID != uid {
		return 0, false
	}
	suffix, ok := strings.CutPrefix(cm.Name, job+"-failures-")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(suffix)
	if err != nil || n < 0 || strconv.Itoa(n) != suffix {
		return 0, false
	}
	return n, true
}
