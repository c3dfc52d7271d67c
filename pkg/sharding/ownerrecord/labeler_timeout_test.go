package ownerrecord

import (
	"context"
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// hangingClient is a metadata client whose namespace PATCH (and, with conflictFirst, the
// re-read after a conflict) is never answered: it returns only when its context ends,
// as a request to an API server that stopped responding does.
type hangingClient struct {
	metadata.Interface
	conflictFirst bool // PATCH answers 409 Conflict, and the GET that follows hangs
}

// IsWatchListSemanticsUnSupported passes on what the fake client says: its informer
// lists, then watches.
func (hangingClient) IsWatchListSemanticsUnSupported() bool { return true }

func (c hangingClient) Resource(r schema.GroupVersionResource) metadata.Getter {
	return hangingResource{Getter: c.Interface.Resource(r), conflictFirst: c.conflictFirst}
}

type hangingResource struct {
	metadata.Getter
	conflictFirst bool
}

func (r hangingResource) Patch(ctx context.Context, name string, _ types.PatchType, _ []byte, _ metav1.PatchOptions, _ ...string) (*metav1.PartialObjectMetadata, error) {
	if r.conflictFirst {
		return nil, apierrors.NewConflict(namespacesGVR.GroupResource(), name, errors.New("the object has been modified"))
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

func (r hangingResource) Get(ctx context.Context, name string, opts metav1.GetOptions, sub ...string) (*metav1.PartialObjectMetadata, error) {
	if !r.conflictFirst {
		return r.Getter.Get(ctx, name, opts, sub...)
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestLabelerRequestTimeout: a label write whose request the API server never answers
// fails after the request timeout, so the batch (and the Acquires waiting for it) is
// retried instead of held until the leadership ends.
func TestLabelerRequestTimeout(t *testing.T) {
	tests := []struct {
		name          string
		conflictFirst bool
	}{
		{name: "the PATCH hangs"},
		{name: "the re-read after a conflict hangs", conflictFirst: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pm := partition.Map{Count: 1}
			client := hangingClient{Interface: fakeClient(t, namespaceMeta("team-a", nil, nil)), conflictFirst: tc.conflictFirst}
			l := runLabeler(t, pm, client, LabelerOptions{RequestTimeout: 50 * time.Millisecond})
			if _, err := l.Activate(1, certain); err != nil {
				t.Fatal(err)
			}
			set := make(chan error, 1)
			go func() {
				_, err := l.Set(context.Background(), map[partition.ID]string{0: "shard-a"})
				set <- err
			}()
			select {
			case err := <-set:
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("Set = %v, want the request's deadline exceeded", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Set still waits for a request the API server never answers")
			}
		})
	}
}
