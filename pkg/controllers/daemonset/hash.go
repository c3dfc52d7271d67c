package daemonset

import (
	"encoding/binary"
	"hash/fnv"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/dump"
)

// templateHash returns the controller-revision-hash of a DaemonSet's template, which
// names its current ControllerRevision and labels its pods. It must equal
// kube-controller-manager's value bit for bit (its ComputeHash, the Deployment's
// pod-template-hash too): a cluster that moves from upstream to kshard keeps its
// revisions, and its pods count as updated, only if an unchanged template keeps its hash.
// The value is the 32-bit FNV-1a of the template's deep dump for hashing, then, once the
// DaemonSet has seen name collisions, the collision count as 8 little-endian bytes; the
// decimal sum is mapped onto the alphabet of generated names.
func templateHash(template *corev1.PodTemplateSpec, collisionCount *int32) string {
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
