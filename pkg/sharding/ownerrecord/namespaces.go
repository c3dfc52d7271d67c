package ownerrecord

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/klog/v2"
)

// The namespace half of the record: every Namespace carries the partition its name hashes
// to in PolicyParams.PartitionLabel, so that the fence policy asks the authorizer about
// the right partition. The value never changes while the partition count stays; a
// namespace without it (created a moment ago) refuses every shard write until the loop
// below writes it, within milliseconds.

// partitionLabelOf is the partition label namespace name must carry.
func (l *Labeler) partitionLabelOf(name string) string {
	return strconv.FormatUint(uint64(l.pm.For(name)), 10)
}

// enqueue queues a namespace whose partition label is not what its name hashes to.
func (l *Labeler) enqueue(obj any) {
	m, err := metaOf(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	if m.GetLabels()[l.params.PartitionLabel] != l.partitionLabelOf(m.GetName()) {
		l.queue.Add(m.GetName())
	}
}

// requeueAll queues every namespace the informer holds without its label: a new leader
// labels what was created while nobody led.
func (l *Labeler) requeueAll() {
	for _, o := range l.informer.GetStore().List() {
		l.enqueue(o)
	}
}

func (l *Labeler) runWorker(ctx context.Context) {
	for l.processNext(ctx) {
	}
}

func (l *Labeler) processNext(ctx context.Context) bool {
	name, shutdown := l.queue.Get()
	if shutdown {
		return false
	}
	defer l.queue.Done(name)
	if err := l.writeLabel(ctx, name); err != nil {
		klog.FromContext(ctx).V(2).Info("writing the partition label failed; retrying", "namespace", name, "err", err.Error())
		l.queue.AddRateLimited(name)
		return true
	}
	l.queue.Forget(name)
	return true
}

// writeLabel gives namespace name its partition label, with the namespace's
// resourceVersion as precondition (re-read on a conflict), only while the Labeler is
// active and its tenure valid (ErrNotCertain otherwise). An inactive Labeler writes
// nothing and reports no error: Activate queues every namespace again.
func (l *Labeler) writeLabel(ctx context.Context, name string) error {
	o, ok, err := l.informer.GetStore().GetByKey(name)
	if err != nil || !ok {
		return err // deleted, or not seen yet: its add event brings it back
	}
	m, err := metaOf(o)
	if err != nil {
		return err
	}
	want := l.partitionLabelOf(name)
	namespaces := l.meta.Resource(namespacesGVR)
	for attempt := 0; ; attempt++ {
		if m.GetLabels()[l.params.PartitionLabel] == want {
			return nil
		}
		active, _, tenure, _ := l.snapshot()
		if !active {
			return nil
		}
		if !tenure.Valid() {
			return fmt.Errorf("namespace %s: %w", name, ErrNotCertain)
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": m.GetResourceVersion(),
			"labels":          map[string]any{l.params.PartitionLabel: want},
		}})
		if err != nil {
			return err
		}
		rctx, cancel := context.WithTimeout(ctx, l.opts.RequestTimeout)
		_, err = namespaces.Patch(rctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
		cancel()
		switch {
		case err == nil, apierrors.IsNotFound(err):
			return nil
		case apierrors.IsConflict(err) && attempt < 5:
			rctx, cancel := context.WithTimeout(ctx, l.opts.RequestTimeout)
			fresh, err := namespaces.Get(rctx, name, metav1.GetOptions{})
			cancel()
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err != nil {
				return err
			}
			m = fresh
		default:
			return fmt.Errorf("namespace %s: %w", name, err)
		}
	}
}

// FieldManager is the field manager of every write of the owner record.
const FieldManager = "kshard-owner-labeler"
