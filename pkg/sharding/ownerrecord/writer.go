package ownerrecord

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// MaxRecordBytes bounds the owner ConfigMap's data. The API server refuses objects
// above about 1.5 MiB (etcd's request limit) and ConfigMaps above 1 MiB of data; staying
// below 1 MiB keeps a margin for metadata. Writer refuses a record that would exceed it
// rather than have every write of the move fail at the API server.
const MaxRecordBytes = 1 << 20

// Writer writes the owner record: the ConfigMap the fence policy reads, data["<N>"] =
// owner shard ID of partition N. It is meant for the coordinator's leader, the only
// writer of the record; writes are still safe against concurrent writers
// (read-modify-write with the resourceVersion as precondition, retried on conflict), so a
// deposed leader racing a new one cannot lose the new one's entries silently.
//
// Each Set or Replace is one API write (or none when nothing changes), however many
// partitions it moves: a coordinator should batch the partitions of one handoff round
// into one call.
type Writer struct {
	client    kubernetes.Interface
	namespace string
	name      string
	pm        partition.Map

	mu     sync.Mutex
	rv     string
	writes int
	term   uint32 // claimed by Claim; 0: writes carry no term and check none
}

// TermAnnotation on the owner ConfigMap holds the highest coordinator leader term that
// claimed it. A Writer that claimed term T refuses to write over a record a newer term
// claimed (ErrDeposed): the write of a deposed leader still in flight when leadership
// moved cannot undo the new leader's record. Every write is a read-modify-write with
// the resourceVersion as precondition, so the check and the write are one step.
const TermAnnotation = "kshard.io/term"

// ErrDeposed is returned by a Writer whose claimed term is older than the record's.
var ErrDeposed = errors.New("owner record: a newer coordinator term claimed it")

// Claim stamps term on the record (creating it when missing) unless a newer term
// claimed it, and returns what the record says then. A new leader calls it before
// anything else; from then on this Writer's writes carry and check term.
func (w *Writer) Claim(ctx context.Context, term uint32) (map[partition.ID]string, error) {
	if term == 0 {
		return nil, errors.New("owner record: term must be positive")
	}
	w.mu.Lock()
	w.term = term
	w.mu.Unlock()
	var out map[partition.ID]string
	err := w.write(ctx, func(data map[string]string) {
		out = w.parse(data)
	})
	return out, err
}

// NewWriter returns a Writer of the ConfigMap namespace/name (name DefaultConfigMapName
// when empty) for the partitions of pm (entries for partitions outside pm are refused).
func NewWriter(client kubernetes.Interface, namespace, name string, pm partition.Map) (*Writer, error) {
	if err := pm.Validate(); err != nil {
		return nil, err
	}
	if namespace == "" {
		return nil, fmt.Errorf("owner record: namespace is required")
	}
	if name == "" {
		name = DefaultConfigMapName
	}
	return &Writer{client: client, namespace: namespace, name: name, pm: pm}, nil
}

// Set records owners[p] as the owner of each partition p named, in one write, leaving
// the other partitions' entries as they are. An empty owner removes the entry: the
// partition then has no owner and every shard write to its namespaces is refused (use
// it for a partition whose owner died while no other shard can take it yet). When every
// entry already says what owners says, Set writes nothing.
//
// After Set returns nil the record is in etcd at ResourceVersion(); it is enforced by
// the API server's admission a moment later (see Prober), not yet necessarily now.
func (w *Writer) Set(ctx context.Context, owners map[partition.ID]string) error {
	if err := w.check(owners); err != nil {
		return err
	}
	return w.write(ctx, func(data map[string]string) {
		for p, owner := range owners {
			k := Key(p)
			if owner == "" {
				delete(data, k)
			} else {
				data[k] = owner
			}
		}
	})
}

// Replace makes the record exactly owners (entries with an empty owner and partitions
// not named are removed), in one write. A newly elected coordinator leader calls it
// once it knows the assignment, to drop whatever a previous leader left.
func (w *Writer) Replace(ctx context.Context, owners map[partition.ID]string) error {
	if err := w.check(owners); err != nil {
		return err
	}
	return w.write(ctx, func(data map[string]string) {
		clear(data)
		for p, owner := range owners {
			if owner != "" {
				data[Key(p)] = owner
			}
		}
	})
}

// Get reads the record from the API server (not a cache): the owner of each partition
// that has one.
func (w *Writer) Get(ctx context.Context) (map[partition.ID]string, error) {
	cm, err := w.client.CoreV1().ConfigMaps(w.namespace).Get(ctx, w.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return map[partition.ID]string{}, nil
	}
	if err != nil {
		return nil, err
	}
	return w.parse(cm.Data), nil
}

// parse reads the owner of each partition of the map from a record's data.
func (w *Writer) parse(data map[string]string) map[partition.ID]string {
	out := make(map[partition.ID]string, len(data))
	for k, v := range data {
		n, err := strconv.ParseUint(k, 10, 32)
		if err != nil || !w.pm.Contains(partition.ID(n)) {
			continue // not a partition of this map: ignored, as the policy never looks it up
		}
		out[partition.ID(n)] = v
	}
	return out
}

// stamp checks that no newer term claimed the record (annotations of the stored
// object, nil when it does not exist) and returns the annotations to write.
func (w *Writer) stamp(stored map[string]string) (map[string]string, error) {
	w.mu.Lock()
	term := w.term
	w.mu.Unlock()
	if term == 0 {
		return stored, nil
	}
	if v, ok := stored[TermAnnotation]; ok {
		if have, err := strconv.ParseUint(v, 10, 32); err == nil && uint32(have) > term {
			return nil, fmt.Errorf("%w: record of term %d, this writer's term %d", ErrDeposed, have, term)
		}
	}
	out := maps.Clone(stored)
	if out == nil {
		out = map[string]string{}
	}
	out[TermAnnotation] = strconv.FormatUint(uint64(term), 10)
	return out, nil
}

// ResourceVersion is the resourceVersion of the record as last written (or read, when a
// Set found nothing to change) by this Writer; "" before the first Set.
func (w *Writer) ResourceVersion() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rv
}

// Writes counts the API writes (creates and updates that succeeded) this Writer made:
// the cost of the fence in API writes per move.
func (w *Writer) Writes() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writes
}

// Key is the ConfigMap data key of partition p, the same text as the Namespace label's
// value: decimal without leading zeros.
func Key(p partition.ID) string { return strconv.FormatUint(uint64(p), 10) }

func (w *Writer) check(owners map[partition.ID]string) error {
	for p := range owners {
		if !w.pm.Contains(p) {
			return fmt.Errorf("owner record: partition %d is not in [0, %d)", p, w.pm.Count)
		}
	}
	return nil
}

// write applies edit to the record's data with a read-modify-write, retried on
// conflicts, and creates the ConfigMap when it does not exist.
func (w *Writer) write(ctx context.Context, edit func(map[string]string)) error {
	cms := w.client.CoreV1().ConfigMaps(w.namespace)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := cms.Get(ctx, w.name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			data := map[string]string{}
			edit(data)
			if err := checkSize(data); err != nil {
				return err
			}
			annotations, err := w.stamp(nil)
			if err != nil {
				return err
			}
			created, err := cms.Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: w.name, Namespace: w.namespace, Annotations: annotations, Labels: map[string]string{
					"app.kubernetes.io/part-of": "kshard", "app.kubernetes.io/component": "owner-record",
				}},
				Data: data,
			}, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				// Someone created it since our Get: retry as an update.
				return apierrors.NewConflict(corev1.Resource("configmaps"), w.name, err)
			}
			if err != nil {
				return err
			}
			w.wrote(created.ResourceVersion)
			return nil
		}
		if err != nil {
			return err
		}
		data := maps.Clone(cm.Data)
		if data == nil {
			data = map[string]string{}
		}
		edit(data)
		annotations, err := w.stamp(cm.Annotations)
		if err != nil {
			return err
		}
		if maps.Equal(data, cm.Data) && maps.Equal(annotations, cm.Annotations) {
			w.mu.Lock()
			w.rv = cm.ResourceVersion
			w.mu.Unlock()
			return nil
		}
		if err := checkSize(data); err != nil {
			return err
		}
		cm.Data, cm.Annotations = data, annotations
		updated, err := cms.Update(ctx, cm, metav1.UpdateOptions{})
		if err != nil {
			return err
		}
		w.wrote(updated.ResourceVersion)
		return nil
	})
}

func (w *Writer) wrote(rv string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.rv = rv
	w.writes++
}

func checkSize(data map[string]string) error {
	n := 0
	for k, v := range data {
		n += len(k) + len(v)
	}
	if n > MaxRecordBytes {
		return fmt.Errorf("owner record: %d bytes of data exceed %d; use fewer partitions or shorter shard IDs", n, MaxRecordBytes)
	}
	return nil
}
