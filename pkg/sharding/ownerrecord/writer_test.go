package ownerrecord

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

func TestWriterSet(t *testing.T) {
	tests := []struct {
		name       string
		existing   map[string]string // nil: no ConfigMap
		set        map[partition.ID]string
		replace    bool
		conflicts  int
		want       map[string]string
		wantWrites int
		wantErr    string
	}{
		{name: "creates the record", set: map[partition.ID]string{1: "shard-a", 7: "shard-b"}, want: map[string]string{"1": "shard-a", "7": "shard-b"}, wantWrites: 1},
		{name: "moves in one write", existing: map[string]string{"1": "shard-a", "2": "shard-a", "3": "shard-c"},
			set: map[partition.ID]string{1: "shard-b", 2: "shard-b"}, want: map[string]string{"1": "shard-b", "2": "shard-b", "3": "shard-c"}, wantWrites: 1},
		{name: "empty owner removes the entry", existing: map[string]string{"1": "shard-a", "2": "shard-a"},
			set: map[partition.ID]string{1: ""}, want: map[string]string{"2": "shard-a"}, wantWrites: 1},
		{name: "nothing to change writes nothing", existing: map[string]string{"1": "shard-a"},
			set: map[partition.ID]string{1: "shard-a"}, want: map[string]string{"1": "shard-a"}, wantWrites: 0},
		{name: "replace drops what is not named", existing: map[string]string{"1": "shard-a", "2": "shard-a", "junk": "x"},
			set: map[partition.ID]string{2: "shard-b", 3: ""}, replace: true, want: map[string]string{"2": "shard-b"}, wantWrites: 1},
		{name: "conflicts are retried", existing: map[string]string{"1": "shard-a"}, conflicts: 2,
			set: map[partition.ID]string{1: "shard-b"}, want: map[string]string{"1": "shard-b"}, wantWrites: 1},
		{name: "partition outside the map", set: map[partition.ID]string{16: "shard-a"}, wantErr: "not in [0, 16)"},
		{name: "record too large", set: bigRecord(), wantErr: "exceed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var objs []runtime.Object
			if tt.existing != nil {
				objs = append(objs, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owners", Namespace: "kshard", ResourceVersion: "5"}, Data: tt.existing})
			}
			client := fake.NewClientset(objs...)
			conflicts := tt.conflicts
			client.PrependReactor("update", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
				if conflicts > 0 {
					conflicts--
					return true, nil, apierrors.NewConflict(corev1.Resource("configmaps"), "owners", nil)
				}
				return false, nil, nil
			})
			count := 16
			if tt.name == "record too large" {
				count = partition.MaxCount
			}
			w, err := NewWriter(client, "kshard", "owners", partition.Map{Count: count})
			if err != nil {
				t.Fatal(err)
			}
			if tt.replace {
				err = w.Replace(context.Background(), tt.set)
			} else {
				err = w.Set(context.Background(), tt.set)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cm, err := client.CoreV1().ConfigMaps("kshard").Get(context.Background(), "owners", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(cm.Data, tt.want) {
				t.Errorf("data = %v, want %v", cm.Data, tt.want)
			}
			if w.Writes() != tt.wantWrites {
				t.Errorf("writes = %d, want %d", w.Writes(), tt.wantWrites)
			}
			if w.ResourceVersion() != cm.ResourceVersion {
				t.Errorf("ResourceVersion() = %q, the ConfigMap's is %q", w.ResourceVersion(), cm.ResourceVersion)
			}
			got, err := w.Get(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.want {
				if got[partition.ID(mustAtoi(t, k))] != v {
					t.Errorf("Get()[%s] = %q, want %q", k, got[partition.ID(mustAtoi(t, k))], v)
				}
			}
		})
	}
}

func bigRecord() map[partition.ID]string {
	out := map[partition.ID]string{}
	for p := range partition.ID(40000) {
		out[p] = "kshard-shard-7d9f8c5b4-abcde"
	}
	return out
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n := 0
	for _, r := range s {
		if r < '0' || r > '9' {
			t.Fatalf("not a number: %q", s)
		}
		n = n*10 + int(r-'0')
	}
	return n
}

// TestWriterClaim: a Writer that claimed term T stamps it on every write and refuses to
// write over a record a newer term claimed, so a deposed leader's late write cannot undo
// the new leader's record.
func TestWriterClaim(t *testing.T) {
	tests := []struct {
		name      string
		stored    string // TermAnnotation of the existing record; "" none
		term      uint32
		wantErr   error
		wantTerm  string
		wantOwner map[partition.ID]string
	}{
		{name: "first claim", term: 3, wantTerm: "3", wantOwner: map[partition.ID]string{1: "shard-a"}},
		{name: "newer term claims", stored: "2", term: 3, wantTerm: "3", wantOwner: map[partition.ID]string{1: "shard-a"}},
		{name: "same term claims again", stored: "3", term: 3, wantTerm: "3", wantOwner: map[partition.ID]string{1: "shard-a"}},
		{name: "deposed leader refused", stored: "4", term: 3, wantErr: ErrDeposed, wantTerm: "4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owners", Namespace: "kshard", ResourceVersion: "5"},
				Data: map[string]string{"1": "shard-a"}}
			if tt.stored != "" {
				cm.Annotations = map[string]string{TermAnnotation: tt.stored}
			}
			client := fake.NewClientset(cm)
			pm, _ := partition.NewMap(16)
			w, err := NewWriter(client, "kshard", "owners", pm)
			if err != nil {
				t.Fatal(err)
			}
			got, err := w.Claim(context.Background(), tt.term)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Claim: err %v, want %v", err, tt.wantErr)
			}
			if err == nil && !maps.Equal(got, tt.wantOwner) {
				t.Fatalf("Claim returned %v, want %v", got, tt.wantOwner)
			}
			setErr := w.Set(context.Background(), map[partition.ID]string{1: "shard-b"})
			if !errors.Is(setErr, tt.wantErr) {
				t.Fatalf("Set after Claim: err %v, want %v", setErr, tt.wantErr)
			}
			stored, _ := client.CoreV1().ConfigMaps("kshard").Get(context.Background(), "owners", metav1.GetOptions{})
			if stored.Annotations[TermAnnotation] != tt.wantTerm {
				t.Fatalf("stored term %q, want %q", stored.Annotations[TermAnnotation], tt.wantTerm)
			}
			if tt.wantErr != nil && stored.Data["1"] != "shard-a" {
				t.Fatalf("a deposed writer changed the record: %v", stored.Data)
			}
		})
	}
}
