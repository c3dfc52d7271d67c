package controllers

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
)

var (
	testPods        = Typed(schema.GroupVersionResource{Version: "v1", Resource: "pods"})
	testDeployments = Typed(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"})
	testOwners      = MetadataOnly(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"})
	testTerminated  = Resource{GroupVersionResource: testPods.GroupVersionResource,
		FieldSelector: "status.phase!=Pending,status.phase!=Running,status.phase!=Unknown"}
)

type nopController struct{}

func (nopController) Run(context.Context, int) {}

func newNop(Context) (Controller, error) { return nopController{}, nil }

// descriptor returns a valid descriptor named name, changed by mutate.
func descriptor(name string, mutate func(*Descriptor)) Descriptor {
	d := Descriptor{Name: name, WorkersFlag: "concurrent-" + name + "-syncs", DefaultWorkers: 2,
		Primary: []Resource{testDeployments}, New: newNop}
	if mutate != nil {
		mutate(&d)
	}
	return d
}

func TestNewRegistryValidatesDescriptors(t *testing.T) {
	tests := []struct {
		name    string
		ds      []Descriptor
		wantErr string
	}{
		{name: "valid", ds: []Descriptor{descriptor("a", nil)}},
		{name: "fixed workers", ds: []Descriptor{descriptor("a", func(d *Descriptor) { d.WorkersFlag, d.DefaultWorkers, d.FixedWorkers = "", 0, 3 })}},
		{name: "no name", ds: []Descriptor{descriptor("", nil)}, wantErr: "needs Name and New"},
		{name: "no New", ds: []Descriptor{descriptor("a", func(d *Descriptor) { d.New = nil })}, wantErr: "needs Name and New"},
		{name: "no workers", ds: []Descriptor{descriptor("a", func(d *Descriptor) { d.WorkersFlag = "" })}, wantErr: "FixedWorkers ≥ 1"},
		{name: "flag and fixed workers", ds: []Descriptor{descriptor("a", func(d *Descriptor) { d.FixedWorkers = 1 })}, wantErr: "has no WorkersFlag"},
		{name: "no primary", ds: []Descriptor{descriptor("a", func(d *Descriptor) { d.Primary = nil })}, wantErr: "Primary must name"},
		{name: "resource without version", ds: []Descriptor{descriptor("a", func(d *Descriptor) {
			d.Reads = []Resource{Typed(schema.GroupVersionResource{Resource: "pods"})}
		})}, wantErr: "needs a version"},
		{name: "scaled client", ds: []Descriptor{descriptor("a", func(d *Descriptor) { d.ClientQPSScale, d.ClientBurstScale = 20, 100 })}},
		{name: "negative client scale", ds: []Descriptor{descriptor("a", func(d *Descriptor) { d.ClientBurstScale = -1 })}, wantErr: "must not be negative"},
		{name: "every resource of every group", ds: []Descriptor{descriptor("a", func(d *Descriptor) {
			d.Permissions = []Permission{{Group: "*", Resource: "*", Verbs: []string{"delete"}}}
		})}},
		{name: "every resource of one group (the metrics APIs' metric names)", ds: []Descriptor{descriptor("a", func(d *Descriptor) {
			d.Permissions = []Permission{{Group: "custom.metrics.k8s.io", Resource: "*", Verbs: []string{"get", "list"}}}
		})}},
		{name: "a wildcard within a resource name", ds: []Descriptor{descriptor("a", func(d *Descriptor) {
			d.Permissions = []Permission{{Group: "apps", Resource: "deploy*", Verbs: []string{"get"}}}
		})}, wantErr: "a wildcard is only allowed"},
		{name: "one subresource of every resource", ds: []Descriptor{descriptor("a", func(d *Descriptor) {
			d.Permissions = []Permission{{Group: "*", Resource: "*/scale", Verbs: []string{"get"}}}
		})}},
		{name: "wildcard subresource", ds: []Descriptor{descriptor("a", func(d *Descriptor) {
			d.Permissions = []Permission{{Group: "*", Resource: "*/*", Verbs: []string{"get"}}}
		})}, wantErr: "a wildcard is only allowed"},
		{name: "wildcard subresource of one group", ds: []Descriptor{descriptor("a", func(d *Descriptor) {
			d.Permissions = []Permission{{Group: "apps", Resource: "*/scale", Verbs: []string{"get"}}}
		})}, wantErr: "a wildcard is only allowed"},
		{name: "wildcard verb", ds: []Descriptor{descriptor("a", func(d *Descriptor) {
			d.Permissions = []Permission{{Group: "*", Resource: "*", Verbs: []string{"*"}}}
		})}, wantErr: "a wildcard is only allowed"},
		{name: "every served resource", ds: []Descriptor{descriptor("a", func(d *Descriptor) {
			d.Served = &ServedResources{Verbs: []string{"delete", "list", "watch"}, Permissions: []string{"get", "patch", "delete"}}
		})}},
		{name: "served resources that cannot be watched", ds: []Descriptor{descriptor("a", func(d *Descriptor) {
			d.Served = &ServedResources{Verbs: []string{"list", "delete"}}
		})}, wantErr: `must include "watch"`},
		{name: "every verb on served resources", ds: []Descriptor{descriptor("a", func(d *Descriptor) {
			d.Served = &ServedResources{Verbs: []string{"list", "watch"}, Permissions: []string{"*"}}
		})}, wantErr: "never a wildcard"},
		{name: "a field-selected read", ds: []Descriptor{descriptor("a", func(d *Descriptor) {
			d.Reads = []Resource{testPods, testTerminated}
		})}},
		{name: "a field selector that does not parse", ds: []Descriptor{descriptor("a", func(d *Descriptor) {
			d.Reads = []Resource{{GroupVersionResource: testPods.GroupVersionResource, FieldSelector: "status.phase"}}
		})}, wantErr: "invalid selector"},
		{name: "a field-selected primary", ds: []Descriptor{descriptor("a", func(d *Descriptor) {
			d.Primary = []Resource{testTerminated}
		})}, wantErr: "a field-selected resource is cached whole"},
		{name: "a field-selected primary of a further queue", ds: []Descriptor{descriptor("a", func(d *Descriptor) {
			d.Reads = []Resource{testTerminated}
			d.Queues = []QueueSpec{{Name: "a_pods", Primary: []Resource{testTerminated}}}
		})}, wantErr: "cannot be a queue's primary"},
		{name: "duplicate", ds: []Descriptor{descriptor("a", nil), descriptor("a", nil)}, wantErr: "registered twice"},
		{name: "alias and canonical name of one controller", ds: []Descriptor{descriptor("replicaset", nil), descriptor("replicaset-controller", nil)}, wantErr: `"replicaset" and "replicaset-controller" are one kube-controller-manager controller`},
		{name: "a further queue", ds: []Descriptor{descriptor("a", func(d *Descriptor) {
			d.Reads = []Resource{testPods}
			d.Queues = []QueueSpec{{Name: "a_pods", Primary: []Resource{testPods}}}
		})}},
		{name: "a further queue of an undeclared resource", ds: []Descriptor{descriptor("a", func(d *Descriptor) {
			d.Queues = []QueueSpec{{Name: "a_pods", Primary: []Resource{testPods}}}
		})}, wantErr: "must be declared in the descriptor's Primary or Reads"},
		{name: "a further queue without primary", ds: []Descriptor{descriptor("a", func(d *Descriptor) {
			d.Queues = []QueueSpec{{Name: "a_pods"}}
		})}, wantErr: "its Primary must name"},
		{name: "a further queue named as the controller", ds: []Descriptor{descriptor("a", func(d *Descriptor) {
			d.Queues = []QueueSpec{{Name: "a", Primary: []Resource{testDeployments}}}
		})}, wantErr: "a name of its own"},
		{name: "two further queues of one name", ds: []Descriptor{descriptor("a", func(d *Descriptor) {
			d.Queues = []QueueSpec{{Name: "q", Primary: []Resource{testDeployments}}, {Name: "q", Primary: []Resource{testDeployments}}}
		})}, wantErr: "a name of its own"},
		{name: "a queue named as upstream's", ds: []Descriptor{descriptor("a", func(d *Descriptor) { d.QueueName = "a_queue" })}},
		{name: "a further queue named as the queue", ds: []Descriptor{descriptor("a", func(d *Descriptor) {
			d.QueueName = "a_queue"
			d.Queues = []QueueSpec{{Name: "a_queue", Primary: []Resource{testDeployments}}}
		})}, wantErr: "a name of its own"},
		{name: "a further queue without a name", ds: []Descriptor{descriptor("a", func(d *Descriptor) {
			d.Queues = []QueueSpec{{Primary: []Resource{testDeployments}}}
		})}, wantErr: "a name of its own"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewRegistry(tt.ds...)
			if tt.wantErr == "" && err != nil {
				t.Fatalf("NewRegistry: %v", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("NewRegistry = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestWorkers(t *testing.T) {
	fixed := descriptor("fixed", func(d *Descriptor) { d.WorkersFlag, d.DefaultWorkers, d.FixedWorkers = "", 0, 1 })
	r, err := NewRegistry(descriptor("flagged", nil), fixed)
	if err != nil {
		t.Fatal(err)
	}
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	r.AddFlags(fs)
	if err := fs.Parse([]string{"--concurrent-flagged-syncs=7"}); err != nil {
		t.Fatal(err)
	}
	if got := r.Workers("flagged"); got != 7 {
		t.Errorf("Workers(flagged) = %d, want 7 from its flag", got)
	}
	if got := r.Workers("fixed"); got != 1 {
		t.Errorf("Workers(fixed) = %d, want its fixed 1", got)
	}
	if fs.Lookup("concurrent-fixed-syncs") != nil {
		t.Error("a controller with FixedWorkers got a worker flag")
	}
}

// TestRegistryValidateControllerFlags: a controller's own flag check runs with the worker
// checks, and every bad flag is reported at once, named by its controller.
func TestRegistryValidateControllerFlags(t *testing.T) {
	var perSlice int
	bounded := descriptor("bounded", func(d *Descriptor) {
		d.AddFlags = func(fs *pflag.FlagSet) { fs.IntVar(&perSlice, "max-things-per-slice", 100, "") }
		d.Validate = func() error {
			if perSlice < 1 || perSlice > 1000 {
				return fmt.Errorf("--max-things-per-slice must be within 1..1000, not %d", perSlice)
			}
			return nil
		}
	})
	tests := []struct {
		name    string
		args    []string
		wantErr []string
	}{
		{name: "defaults"},
		{name: "in bounds", args: []string{"--max-things-per-slice=1000"}},
		{name: "out of bounds", args: []string{"--max-things-per-slice=1001"},
			wantErr: []string{"controller bounded: --max-things-per-slice must be within 1..1000, not 1001"}},
		{name: "with a bad worker count", args: []string{"--max-things-per-slice=0", "--concurrent-bounded-syncs=0"},
			wantErr: []string{"not 0", "concurrent-bounded-syncs"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := NewRegistry(bounded)
			if err != nil {
				t.Fatal(err)
			}
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			r.AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err = r.Validate(Selection{})
			if len(tc.wantErr) == 0 && err != nil {
				t.Fatalf("Validate: %v", err)
			}
			for _, want := range tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("Validate = %v, want an error containing %q", err, want)
				}
			}
		})
	}
}

func TestAllPermissions(t *testing.T) {
	tests := []struct {
		name string
		d    Descriptor
		want []Permission
	}{
		{
			name: "reads get list and watch",
			d: descriptor("a", func(d *Descriptor) {
				d.Reads = []Resource{testPods, testOwners}
				d.Permissions = []Permission{{Group: "apps", Resource: "deployments/status", Verbs: []string{"update"}}}
			}),
			want: []Permission{
				{Group: "apps", Resource: "deployments/status", Verbs: []string{"update"}},
				{Group: "apps", Resource: "deployments", Verbs: []string{"list", "watch"}},
				{Group: "", Resource: "pods", Verbs: []string{"list", "watch"}},
				{Group: "example.com", Resource: "widgets", Verbs: []string{"list", "watch"}},
			},
		},
		{
			name: "merged into a declared rule of the same resource, without duplicates",
			d: descriptor("a", func(d *Descriptor) {
				d.Reads = []Resource{testPods, testPods}
				d.Permissions = []Permission{{Resource: "pods", Verbs: []string{"create", "watch"}}}
			}),
			want: []Permission{
				{Resource: "pods", Verbs: []string{"create", "watch", "list"}},
				{Group: "apps", Resource: "deployments", Verbs: []string{"list", "watch"}},
			},
		},
		{
			name: "a field-selected read is list and watch of its resource",
			d: descriptor("a", func(d *Descriptor) {
				d.Reads = []Resource{testTerminated}
				d.Permissions = []Permission{{Resource: "pods", Verbs: []string{"delete"}}}
			}),
			want: []Permission{
				{Resource: "pods", Verbs: []string{"delete", "list", "watch"}},
				{Group: "apps", Resource: "deployments", Verbs: []string{"list", "watch"}},
			},
		},
		{
			name: "served resources: list, watch and their verbs on every resource",
			d: descriptor("a", func(d *Descriptor) {
				d.Served = &ServedResources{Verbs: []string{"delete", "list", "watch"}, Permissions: []string{"get", "patch", "delete"}}
			}),
			want: []Permission{
				{Group: "apps", Resource: "deployments", Verbs: []string{"list", "watch"}},
				{Group: "*", Resource: "*", Verbs: []string{"list", "watch", "get", "patch", "delete"}},
			},
		},
		{
			name: "served resources merged into a declared rule on every resource",
			d: descriptor("a", func(d *Descriptor) {
				d.Permissions = []Permission{{Group: "*", Resource: "*", Verbs: []string{"delete"}}}
				d.Served = &ServedResources{Verbs: []string{"list", "watch"}, Permissions: []string{"get"}}
			}),
			want: []Permission{
				{Group: "*", Resource: "*", Verbs: []string{"delete", "list", "watch", "get"}},
				{Group: "apps", Resource: "deployments", Verbs: []string{"list", "watch"}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.d.AllPermissions()
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("AllPermissions =\n%v\nwant\n%v", got, tt.want)
			}
		})
	}
}

type recordingInformers struct{ asked []Resource }

func (r *recordingInformers) InformerFor(res Resource) (toolscache.SharedIndexInformer, error) {
	r.asked = append(r.asked, res)
	return nil, nil
}

func TestDeclared(t *testing.T) {
	d := descriptor("a", func(d *Descriptor) { d.Reads = []Resource{testPods} })
	tests := []struct {
		name    string
		r       Resource
		wantErr bool
	}{
		{name: "primary", r: testDeployments},
		{name: "read", r: testPods},
		{name: "undeclared", r: testOwners, wantErr: true},
		{name: "declared typed, asked metadata-only", r: MetadataOnly(testPods.GroupVersionResource), wantErr: true},
		{name: "declared without a selector, asked field-selected", r: testTerminated, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inner := &recordingInformers{}
			_, err := Declared(d, inner).InformerFor(tt.r)
			if (err != nil) != tt.wantErr {
				t.Fatalf("InformerFor(%s) = %v, want error %v", tt.r, err, tt.wantErr)
			}
			if tt.wantErr && len(inner.asked) != 0 {
				t.Errorf("an undeclared resource reached the shard's informers: %v", inner.asked)
			}
		})
	}
}

func TestEventComponent(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    Descriptor
		want string
	}{
		{name: "derived from the name", d: Descriptor{Name: "replicaset"}, want: "replicaset-controller"},
		{name: "upstream's own name", d: Descriptor{Name: "replicationcontroller", EventSource: "replication-controller"},
			want: "replication-controller"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.d.EventComponent(); got != tc.want {
				t.Errorf("EventComponent() = %q, want %q", got, tc.want)
			}
		})
	}
}
