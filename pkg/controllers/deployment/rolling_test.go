package deployment

import (
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func TestResolveFenceposts(t *testing.T) {
	tests := []struct {
		name                   string
		surge, unavailable     *intstr.IntOrString
		desired                int32
		wantSurge, wantUnavail int32
		wantErr                bool
	}{
		{name: "numbers", surge: ptr.To(intstr.FromInt32(2)), unavailable: ptr.To(intstr.FromInt32(1)), desired: 10, wantSurge: 2, wantUnavail: 1},
		{name: "default 25% of 10: surge rounds up, unavailable down", surge: ptr.To(intstr.FromString("25%")), unavailable: ptr.To(intstr.FromString("25%")), desired: 10, wantSurge: 3, wantUnavail: 2},
		{name: "25% of 1", surge: ptr.To(intstr.FromString("25%")), unavailable: ptr.To(intstr.FromString("25%")), desired: 1, wantSurge: 1, wantUnavail: 0},
		{name: "both zero: one may be unavailable", surge: ptr.To(intstr.FromInt32(0)), unavailable: ptr.To(intstr.FromInt32(0)), desired: 5, wantSurge: 0, wantUnavail: 1},
		{name: "both percentages round to zero", surge: ptr.To(intstr.FromString("0%")), unavailable: ptr.To(intstr.FromString("10%")), desired: 5, wantSurge: 0, wantUnavail: 1},
		{name: "nil values are zero", desired: 3, wantSurge: 0, wantUnavail: 1},
		{name: "100% unavailable", surge: ptr.To(intstr.FromInt32(0)), unavailable: ptr.To(intstr.FromString("100%")), desired: 7, wantSurge: 0, wantUnavail: 7},
		{name: "33% of 10", surge: ptr.To(intstr.FromString("33%")), unavailable: ptr.To(intstr.FromString("33%")), desired: 10, wantSurge: 4, wantUnavail: 3},
		{name: "invalid percentage", surge: ptr.To(intstr.FromString("x%")), desired: 3, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, u, err := resolveFenceposts(tt.surge, tt.unavailable, tt.desired)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if !tt.wantErr && (s != tt.wantSurge || u != tt.wantUnavail) {
				t.Errorf("got surge %d unavailable %d, want %d %d", s, u, tt.wantSurge, tt.wantUnavail)
			}
		})
	}
}

func TestMaxSurgeMaxUnavailable(t *testing.T) {
	tests := []struct {
		name                   string
		d                      *appsv1.Deployment
		wantSurge, wantUnavail int32
	}{
		{name: "defaults of 4", d: newDeployment("d", 4), wantSurge: 1, wantUnavail: 1},
		{name: "recreate", d: recreate(newDeployment("d", 4)), wantSurge: 0, wantUnavail: 0},
		{name: "zero replicas", d: newDeployment("d", 0), wantSurge: 0, wantUnavail: 0},
		{name: "unavailable capped at replicas", d: withStrategy(newDeployment("d", 2), intstr.FromInt32(0), intstr.FromInt32(5)), wantSurge: 0, wantUnavail: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := maxSurge(tt.d); got != tt.wantSurge {
				t.Errorf("maxSurge = %d, want %d", got, tt.wantSurge)
			}
			if got := maxUnavailable(tt.d); got != tt.wantUnavail {
				t.Errorf("maxUnavailable = %d, want %d", got, tt.wantUnavail)
			}
		})
	}
}

func TestNewReplicaSetReplicas(t *testing.T) {
	tests := []struct {
		name     string
		d        *appsv1.Deployment
		newSize  int32
		oldSizes []int32
		want     int32
	}{
		{name: "surge room", d: withStrategy(newDeployment("d", 10), intstr.FromInt32(2), intstr.FromInt32(0)), newSize: 0, oldSizes: []int32{10}, want: 2},
		{name: "no surge room", d: withStrategy(newDeployment("d", 10), intstr.FromInt32(2), intstr.FromInt32(0)), newSize: 2, oldSizes: []int32{10}, want: 2},
		{name: "capped at replicas", d: withStrategy(newDeployment("d", 10), intstr.FromInt32(5), intstr.FromInt32(0)), newSize: 8, oldSizes: []int32{1}, want: 10},
		{name: "percentage rounds up", d: withStrategy(newDeployment("d", 10), intstr.FromString("15%"), intstr.FromInt32(0)), newSize: 0, oldSizes: []int32{10}, want: 2},
		{name: "recreate: full size", d: recreate(newDeployment("d", 6)), newSize: 0, oldSizes: []int32{6}, want: 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			newRS := newReplicaSet(tt.d, "new", tt.newSize, 0, 2)
			all := []*appsv1.ReplicaSet{newRS}
			for i, s := range tt.oldSizes {
				all = append(all, oldReplicaSet(tt.d, "old"+string(rune('a'+i)), s, time.Hour, 1))
			}
			got, err := newReplicaSetReplicas(tt.d, all, newRS)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %d, want %d", got, tt.want)
			}
		})
	}
}

// TestRollingStep runs one sync of a rolling update in progress and checks which
// ReplicaSets it resized, by how much, and in which order.
func TestRollingStep(t *testing.T) {
	tests := []struct {
		name      string
		d         *appsv1.Deployment
		rss       func(d *appsv1.Deployment) []*appsv1.ReplicaSet
		wantSizes map[string]int32
		wantOrder []string
	}{
		{
			name: "new ReplicaSet grows by maxSurge",
			d:    withStrategy(newDeployment("d", 4), intstr.FromInt32(1), intstr.FromInt32(0)),
			rss: func(d *appsv1.Deployment) []*appsv1.ReplicaSet {
				return []*appsv1.ReplicaSet{oldReplicaSet(d, "a", 4, time.Hour, 1), withAvailable(newReplicaSet(d, "b", 0, time.Minute, 2), 0)}
			},
			wantSizes: map[string]int32{"d-a": 4, "d-b": 1},
			wantOrder: []string{"update replicasets d-b", "update deployments/status d"},
		},
		{
			name: "old ReplicaSet shrinks once the new pods are available",
			d:    withStrategy(newDeployment("d", 4), intstr.FromInt32(1), intstr.FromInt32(0)),
			rss: func(d *appsv1.Deployment) []*appsv1.ReplicaSet {
				return []*appsv1.ReplicaSet{oldReplicaSet(d, "a", 4, time.Hour, 1), newReplicaSet(d, "b", 1, time.Minute, 2)}
			},
			wantSizes: map[string]int32{"d-a": 3, "d-b": 1},
			wantOrder: []string{"update replicasets d-a", "update deployments/status d"},
		},
		{
			name: "old ReplicaSet does not shrink while new pods are unavailable and maxUnavailable is 0",
			d:    withStrategy(newDeployment("d", 4), intstr.FromInt32(1), intstr.FromInt32(0)),
			rss: func(d *appsv1.Deployment) []*appsv1.ReplicaSet {
				return []*appsv1.ReplicaSet{oldReplicaSet(d, "a", 4, time.Hour, 1), withAvailable(newReplicaSet(d, "b", 1, time.Minute, 2), 0)}
			},
			wantSizes: map[string]int32{"d-a": 4, "d-b": 1},
			wantOrder: []string{"update deployments/status d"},
		},
		{
			name: "unavailable old replicas go first, oldest ReplicaSet first",
			d:    withStrategy(newDeployment("d", 10), intstr.FromInt32(0), intstr.FromInt32(2)),
			rss: func(d *appsv1.Deployment) []*appsv1.ReplicaSet {
				return []*appsv1.ReplicaSet{
					withAvailable(oldReplicaSet(d, "a", 5, 2*time.Hour, 1), 4),
					withAvailable(oldReplicaSet(d, "b", 5, time.Hour, 2), 3),
					withAvailable(newReplicaSet(d, "c", 0, time.Minute, 3), 0),
				}
			},
			// 10 - 2 may be available: 7 are, so 2 unhealthy ones go (a: 1, b: 1); the
			// healthy step then sees 7 available and minAvailable 8: nothing more.
			wantSizes: map[string]int32{"d-a": 4, "d-b": 4, "d-c": 0},
			wantOrder: []string{"update replicasets d-a", "update replicasets d-b", "update deployments/status d"},
		},
		{
			name: "maxUnavailable lets old ReplicaSets shrink before the new one grows (surge 0)",
			d:    withStrategy(newDeployment("d", 4), intstr.FromInt32(0), intstr.FromInt32(1)),
			rss: func(d *appsv1.Deployment) []*appsv1.ReplicaSet {
				return []*appsv1.ReplicaSet{oldReplicaSet(d, "a", 4, time.Hour, 1), withAvailable(newReplicaSet(d, "b", 0, time.Minute, 2), 0)}
			},
			wantSizes: map[string]int32{"d-a": 3, "d-b": 0},
			wantOrder: []string{"update replicasets d-a", "update deployments/status d"},
		},
		{
			// Right after a proportional scale-down the old ReplicaSet's status still counts
			// the replicas it had: scaling down on it could drop below minAvailable (it
			// once cut 4 → 0). The sync fails and nothing is scaled, as upstream.
			name: "status older than the spec stops the scale-down",
			d:    withStrategy(newDeployment("d", 4), intstr.FromInt32(2), intstr.FromInt32(1)),
			rss: func(d *appsv1.Deployment) []*appsv1.ReplicaSet {
				return []*appsv1.ReplicaSet{withAvailable(oldReplicaSet(d, "a", 4, time.Hour, 1), 9), withAvailable(newReplicaSet(d, "b", 2, time.Minute, 2), 0)}
			},
			wantSizes: map[string]int32{"d-a": 4, "d-b": 2},
			wantOrder: []string{"update deployments/status d"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := synced(tt.d, "")
			rss := tt.rss(d)
			d.Annotations[RevisionAnnotation] = rss[len(rss)-1].Annotations[RevisionAnnotation]
			objs := []runtime.Object{d}
			for _, rs := range rss {
				objs = append(objs, rs)
			}
			f := newFixture(t, objs...)
			f.mustSync("d")
			for name, want := range tt.wantSizes {
				if got := *f.replicaSet(name).Spec.Replicas; got != want {
					t.Errorf("%s has %d replicas, want %d", name, got, want)
				}
			}
			if got := f.writes(); !slices.Equal(got, tt.wantOrder) {
				t.Errorf("writes = %q, want %q", got, tt.wantOrder)
			}
		})
	}
}
