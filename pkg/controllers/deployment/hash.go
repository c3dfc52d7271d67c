package deployment

import (
	"encoding/binary"
	"hash/fnv"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/dump"
)

// podTemplateHash returns the pod-template-hash of a Deployment's template. It must equal
// kube-controller-manager's value bit for bit: a cluster that moves from upstream to kshard
// keeps its ReplicaSets only if the hash of an unchanged template is unchanged. The value
// is the 32-bit FNV-1a of the template's deep dump for hashing (k8s.io/utils/dump.ForHash:
// sorted map keys, pointers followed), then, when the Deployment has seen name collisions,
// the collision count as 8 little-endian bytes; the decimal sum is mapped onto the
// alphabet of generated names.
func podTemplateHash(template *corev1.PodTemplateSpec, collisionCount *int32) string {
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

// replicaSetName is "<deployment>-<hash>", with the Deployment's name shortened so that the
// result stays a valid object name (253 characters).
func replicaSetName(deployment, hash string) string {
	limit := validation.DNS1123SubdomainMaxLength - 1 - len(hash)
	if limit > 0 && len(deployment) > limit {
		deployment = deployment[:limit]
	}
	return deployment + "-" + hash
}
