// Package templatehash computes kube-controller-manager's hash of a pod template, shared by
// the controllers that name objects after it (Deployment, DaemonSet).
package templatehash

import (
	"encoding/binary"
	"hash/fnv"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/dump"
)

// Compute returns kube-controller-manager's hash of a pod template (its
// controller.ComputeHash): a Deployment's pod-template-hash, which names its ReplicaSets,
// and a DaemonSet's controller-revision-hash, which names its ControllerRevisions and
// labels its pods. It must equal upstream's value bit for bit: a cluster that moves from
// upstream to kshard keeps its ReplicaSets and revisions, and its pods count as updated,
// only if the hash of an unchanged template is unchanged. The value
// is the 32-bit FNV-1a of the template's deep dump for hashing (k8s.io/utils/dump.ForHash:
// sorted map keys, pointers followed), then, when the owner has seen name collisions,
// the collision count as 8 little-endian bytes; the decimal sum is mapped onto the
// alphabet of generated names.
func Compute(template *corev1.PodTemplateSpec, collisionCount *int32) string {
	h := fnv.New32a()
	// Writes to an fnv hash never fail.
	_, _ = h.Write([]byte(dump.ForHash(*template)))
	if collisionCount != nil {
		var b [8]byte
		binary.LittleEndian.PutUint32(b[:4], uint32(*collisionCount))
		_, _ = h.Write(b[:])
	}
	return rand.SafeEncodeString(strconv.FormatUint(uint64(h.Sum32()), 10))
}
