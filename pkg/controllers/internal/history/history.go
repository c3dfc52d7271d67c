package history

import (
	"bytes"
	"fmt"
	"hash"
	"hash/fnv"
	"sort"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/dump"
)

// HashLabel is the label carrying a revision's hash (upstream's
// ControllerRevisionHashLabel); kubectl does not read it, but upstream writes it and a
// revision must look the same whoever created it.
const HashLabel = "controller.kubernetes.io/hash"

// maxPrefix is the longest parent name a revision name keeps: with "-" and a hash of at
// most 10 characters and some headroom, the name stays within 253 characters.
const maxPrefix = 223

// Name returns the revision name "<prefix>-<hash>", the prefix (the parent's name)
// truncated to 223 characters.
func Name(prefix, hash string) string {
	if len(prefix) > maxPrefix {
		prefix = prefix[:maxPrefix]
	}
	return prefix + "-" + hash
}

// Hash returns a revision's hash, which names it. It must be upstream's value bit for bit:
// the 32-bit FNV-1 (not FNV-1a) of the revision's raw data, or, for data held as an
// object, of its deep dump for hashing (which replaces the raw bytes, as upstream's hasher
// is reset before the dump), then, with a probe (the collision count), the probe in
// decimal; the decimal sum is mapped onto the alphabet of generated names.
func Hash(rev *appsv1.ControllerRevision, probe *int32) string {
	h := fnv.New32()
	// Writes to an fnv hash never fail.
	if len(rev.Data.Raw) > 0 {
		_, _ = h.Write(rev.Data.Raw)
	}
	if rev.Data.Object != nil {
		writeDump(h, rev.Data.Object)
	}
	if probe != nil {
		_, _ = h.Write([]byte(strconv.FormatInt(int64(*probe), 10)))
	}
	return rand.SafeEncodeString(fmt.Sprint(h.Sum32()))
}

func writeDump(h hash.Hash32, obj runtime.Object) {
	h.Reset()
	_, _ = fmt.Fprintf(h, "%v", dump.ForHash(obj))
}

// New returns a revision of parent (of parentKind, which becomes its controller) holding
// data as revision number revision, labelled with templateLabels and its hash, named
// after parent and the hash with collisionCount as the probe. It has no namespace: Create
// gives it the parent's.
func New(parent metav1.Object, parentKind schema.GroupVersionKind, templateLabels map[string]string,
	data runtime.RawExtension, revision int64, collisionCount *int32) *appsv1.ControllerRevision {
	labels := make(map[string]string, len(templateLabels)+1)
	for k, v := range templateLabels {
		labels[k] = v
	}
	rev := &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{
			Labels:          labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(parent, parentKind)},
		},
		Data:     data,
		Revision: revision,
	}
	h := Hash(rev, collisionCount)
	rev.Name = Name(parent.GetName(), h)
	rev.Labels[HashLabel] = h
	return rev
}

// Sort orders revisions by number, ties by creation time, then name (stable).
func Sort(revs []*appsv1.ControllerRevision) {
	sort.SliceStable(revs, func(i, j int) bool {
		a, b := revs[i], revs[j]
		if a.Revision != b.Revision {
			return a.Revision < b.Revision
		}
		if a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.Name < b.Name
		}
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	})
}

// Equal reports whether both are nil, or both hold the same data (equal raw bytes and
// semantically equal objects).
func Equal(a, b *appsv1.ControllerRevision) bool {
	if a == nil || b == nil {
		return a == b
	}
	return bytes.Equal(a.Data.Raw, b.Data.Raw) && apiequality.Semantic.DeepEqual(a.Data.Object, b.Data.Object)
}

// FindEqual returns the revisions of revs that hold needle's data, in order.
func FindEqual(revs []*appsv1.ControllerRevision, needle *appsv1.ControllerRevision) []*appsv1.ControllerRevision {
	var eq []*appsv1.ControllerRevision
	for _, r := range revs {
		if Equal(r, needle) {
			eq = append(eq, r)
		}
	}
	return eq
}

// Next returns the number of the next revision: 1 past the last of revs, which must be
// sorted (Sort), or 1 when there is none.
func Next(revs []*appsv1.ControllerRevision) int64 {
	if len(revs) == 0 {
		return 1
	}
	return revs[len(revs)-1].Revision + 1
}
