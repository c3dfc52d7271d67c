package edgetest_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kshard/kshard/pkg/sharding/coordinatorrpc"
	"github.com/kshard/kshard/pkg/sharding/shardauth"
	"github.com/kshard/kshard/pkg/sharding/shardrpc"
	kshardv1 "github.com/kshard/kshard/proto/kshard/v1"
)

// groupHello is a hello of shard in group at session inc/seq.
func groupHello(shard string, inc, seq uint64, group string) *kshardv1.ShardMessage {
	return &kshardv1.ShardMessage{Session: sess(inc, seq),
		Kind: &kshardv1.ShardMessage_Hello{Hello: &kshardv1.Hello{ShardId: shard, BuildVersion: "raw", Group: group}}}
}

// TestShardGroupVerified: with token authentication, the shard group a hello claims must
// be the group of the pod its token is bound to (the pod's kshard.io/shard-group label).
// A shard run in its pod's group is welcomed and listed with the group; a client holding
// a valid shard token and claiming a group its pod is not in is refused before its hello
// reaches the state machine, and so is a second hello on a welcomed stream that claims
// another group; the real shard's session goes on undisturbed.
func TestShardGroupVerified(t *testing.T) {
	w := newWorld(t)
	api := newTokenAPI()
	serverCreds, clientCreds := mtls(t)
	// The fake token API binds each token to pod UID "uid-<pod>".
	pod := func(name, group string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: shardNamespace, UID: types.UID("uid-" + name), Labels: map[string]string{}}}
		if group != "" {
			p.Labels[shardauth.GroupLabel] = group
		}
		return p
	}
	pods := fake.NewClientset(pod("shard-hot", "hot"), pod("shard-plain", ""))
	groups, err := shardauth.NewPodGroups(shardauth.PodGroupsOptions{Client: pods.CoreV1(), Namespace: shardNamespace})
	if err != nil {
		t.Fatal(err)
	}
	co := startCoordinator(t, w, "coordinator", serverCreds, func(o *coordinatorrpc.Options) {
		o.Authenticator, o.GroupVerifier = api.authenticator(t), groups
	})
	co.lead(t, 1)
	tokenFile := filepath.Join(t.TempDir(), "token")
	writeToken(t, tokenFile, api.issue("shard-hot"))
	s := startShard(t, w, "shard-hot", clientCreds, []string{co.addr}, func(o *shardrpc.Options, _ *fakeHandler) {
		o.TokenFile, o.Group = tokenFile, "hot"
	})
	co.waitSettled(t, w, s)
	if a, ok := co.assignments(t); !ok || len(a.Shards) != 1 || a.Shards[0].Group != "hot" {
		t.Fatalf("assignments %+v (%v), want shard-hot in group hot", a.Shards, ok)
	}

	refused := []struct {
		name, token, shard, group, wantReason string
		wantCode                              codes.Code
	}{
		{name: "a valid token claiming a group its pod is not in", token: api.issue("shard-plain"), shard: "shard-plain", group: "hot",
			wantReason: shardauth.ReasonGroupMismatch, wantCode: codes.PermissionDenied},
		{name: "the default group, from a pod in a group", token: api.issue("shard-hot"), shard: "shard-hot", group: "",
			wantReason: shardauth.ReasonGroupMismatch, wantCode: codes.PermissionDenied},
		{name: "a token whose pod is gone", token: api.issue("shard-gone"), shard: "shard-gone", group: "hot",
			wantReason: shardauth.ReasonPodUIDMismatch, wantCode: codes.PermissionDenied},
	}
	for _, tc := range refused {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			sessions := testutil.ToFloat64(co.metrics.Sessions)
			rejected := testutil.ToFloat64(co.metrics.AuthRejected.WithLabelValues(tc.wantReason))
			stream, _ := rawStream(t, co.addr, clientCreds, tc.token)
			got, err := sendAll(t, stream, groupHello(tc.shard, uint64(time.Now().UnixNano()), 1, tc.group))
			if status.Code(err) != tc.wantCode || len(got) != 0 {
				t.Fatalf("got %d messages and %v, want %s and nothing else", len(got), err, tc.wantCode)
			}
			if n := testutil.ToFloat64(co.metrics.AuthRejected.WithLabelValues(tc.wantReason)); n != rejected+1 {
				t.Errorf("auth_rejected{reason=%q} went from %v to %v", tc.wantReason, rejected, n)
			}
			if n := testutil.ToFloat64(co.metrics.Sessions); n != sessions {
				t.Errorf("sessions went from %v to %v: the hello reached the state machine", sessions, n)
			}
		})
	}

	t.Run("refused: another group in a later hello of the stream", func(t *testing.T) {
		rejected := testutil.ToFloat64(co.metrics.AuthRejected.WithLabelValues(shardauth.ReasonGroupMismatch))
		stream, _ := rawStream(t, co.addr, clientCreds, api.issue("shard-plain"))
		inc := uint64(time.Now().UnixNano())
		if m, err := firstReply(t, stream, groupHello("shard-plain", inc, 1, "")); err != nil || m.GetWelcome() == nil {
			t.Fatalf("the pod's own group: got %v, %v; want a Welcome", m, err)
		}
		if _, err := sendAll(t, stream, groupHello("shard-plain", inc, 2, "hot")); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("a second hello claiming hot: %v, want %s", err, codes.PermissionDenied)
		}
		if n := testutil.ToFloat64(co.metrics.AuthRejected.WithLabelValues(shardauth.ReasonGroupMismatch)); n != rejected+1 {
			t.Errorf("auth_rejected{reason=%q} went from %v to %v", shardauth.ReasonGroupMismatch, rejected, n)
		}
	})

	acks := rttCount(t, s)
	waitFor(t, 10*time.Second, "two more acknowledged heartbeats of the real shard", func() (bool, string) {
		n := rttCount(t, s)
		return n >= acks+2, fmt.Sprintf("%d acks, had %d", n, acks)
	})
	if ws := s.h.workingSet(); len(ws) == 0 {
		t.Error("the real shard works nothing")
	}
}
