package differential

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	kptr "k8s.io/utils/ptr"
)

// The garbage collector scenario. Owners: Deployments (with their ReplicaSets and pods),
// Gadgets (a namespaced CRD's objects) owning ConfigMaps, ConfigMaps owning ConfigMaps,
// three Realms (a cluster-scoped CRD's objects) owning ConfigMaps of two namespaces. Dependents
// whose owner reference is wrong from the start: dangling (a UID that never existed), UID
// mismatch (an existing owner's name, another UID), wrong kind (an existing owner's name
// and UID under another kind), unknown kind (a kind nobody serves), cross-namespace (an
// owner in another namespace: Warning OwnerRefInvalidNamespace). Then the owners are
// deleted in the background, in the foreground and with orphaning, two of them in the
// foreground with a dependent held by a foreign finalizer (blockOwnerDeletion false, then
// true), the Realms in the background, in the foreground (one of its blocking dependents
// held) and with orphaning; then the held dependents are released. Under kshard the
// Realms' foreground and orphan deletions take the cross-shard barrier (docs/architecture.md,
// "The garbage collector across shards") whether or not "gc" and "other" share a shard.
//
// Compared: which objects exist in both namespaces and the side's Realms (pods counted per
// owner), whether each is being deleted, its finalizers and owner references
// (kind/name, controller, blockOwnerDeletion, whether the UID is the named owner's), and
// the garbage collector's events with their normalised messages.

var (
	gcGroup   = "gc-differential.kshard.io"
	gcGadgets = schema.GroupVersionResource{Group: gcGroup, Version: "v1", Resource: "gadgets"}
	gcRealms  = schema.GroupVersionResource{Group: gcGroup, Version: "v1", Resource: "realms"}
	// gcUID matches a UID in an event's message.
	gcUID = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	// gcRSName matches the generated part of a ReplicaSet's name (web-<mode>-<hash>).
	gcRSName = regexp.MustCompile(`\b(web-[a-z]+)-[a-z0-9]{6,10}\b`)
)

// gcNever is a UID no object ever had.
const gcNever = types.UID("00000000-0000-4000-8000-00000000dead")

func TestDifferentialGarbageCollector(t *testing.T) {
	scenario{
		controllers: []string{"garbagecollector", "deployment", "replicaset"},
		namespaces:  []string{"gc", "other"},
		steps:       gcSteps(t),
		snapshot:    gcSnapshot,
	}.run(t)
}

// realm is the name of the side's Realm deleted with propagation mode ("bg", "fg",
// "orphan"): cluster-scoped, it carries the side's namespace so that two sets of
// namespaces on one cluster (SelfCheckEnv) do not share it.
func (s *side) realm(mode string) string { return s.ns["gc"] + "-realm-" + mode }

// gcRealmModes are the Realms' propagation modes.
var gcRealmModes = []string{"bg", "fg", "orphan"}

// gcSteps are the scenario's steps; t logs each side's namespaces (whether "gc" and
// "other" fell to one kshard shard or to two tells which cross-namespace path ran).
func gcSteps(t testing.TB) []step {
	return []step{
		{name: "create the CRDs, then owners: Deployments, Gadgets, ConfigMaps, a Realm (a childless Gadget deleted in the foreground proves the collector sees Gadgets)", do: func(ctx context.Context, s *side) error {
			t.Logf("%s: namespaces %v", s.name, s.ns)
			dyn, err := dynamic.NewForConfig(s.f.Config)
			if err != nil {
				return err
			}
			if err := ensureCRD(ctx, dyn, gcGroup, "Gadget", "gadgets", "Namespaced", gcGadgets, "default"); err != nil {
				return err
			}
			if err := ensureCRD(ctx, dyn, gcGroup, "Realm", "realms", "Cluster", gcRealms, ""); err != nil {
				return err
			}
			ns := s.ns["gc"]
			for _, mode := range []string{"bg", "fg", "orphan"} {
				if _, err := s.f.Client.AppsV1().Deployments(ns).Create(ctx, gcDeployment("web-"+mode), metav1.CreateOptions{}); err != nil {
					return err
				}
			}
			for _, name := range []string{"gadget-bg", "gadget-fg", "gadget-orphan", "probe"} {
				if _, err := s.createGadget(ctx, name); err != nil {
					return err
				}
			}
			if err := dyn.Resource(gcGadgets).Namespace(ns).Delete(ctx, "probe", metav1.DeleteOptions{PropagationPolicy: kptr.To(metav1.DeletePropagationForeground)}); err != nil {
				return err
			}
			for _, name := range []string{"target", "hold-nonblocking", "hold-blocking"} {
				if _, err := s.createCM(ctx, "gc", name, nil, nil); err != nil {
					return err
				}
			}
			if _, err := s.createCM(ctx, "other", "elsewhere", nil, nil); err != nil {
				return err
			}
			for _, mode := range gcRealmModes {
				realm := &unstructured.Unstructured{Object: map[string]any{
					"apiVersion": gcGroup + "/v1", "kind": "Realm", "metadata": map[string]any{"name": s.realm(mode)}}}
				if _, err := dyn.Resource(gcRealms).Create(ctx, realm, metav1.CreateOptions{}); err != nil {
					return err
				}
			}
			return nil
		}},
		{name: "create dependents: of the Gadgets and ConfigMaps, dangling, UID mismatch, wrong kind, unknown kind, cross-namespace, held, of the Realms in both namespaces", do: func(ctx context.Context, s *side) error {
			dyn, err := dynamic.NewForConfig(s.f.Config)
			if err != nil {
				return err
			}
			for _, g := range []string{"gadget-bg", "gadget-fg", "gadget-orphan"} {
				owner, err := dyn.Resource(gcGadgets).Namespace(s.ns["gc"]).Get(ctx, g, metav1.GetOptions{})
				if err != nil {
					return err
				}
				for i, block := range []bool{true, false} {
					ref := gcRef(gcGroup+"/v1", "Gadget", g, owner.GetUID(), block)
					if _, err := s.createCM(ctx, "gc", fmt.Sprintf("%s-%d", g, i+1), []metav1.OwnerReference{ref}, nil); err != nil {
						return err
					}
				}
			}
			cm := func(ns, name string) (*corev1.ConfigMap, error) {
				return s.f.Client.CoreV1().ConfigMaps(s.ns[ns]).Get(ctx, name, metav1.GetOptions{})
			}
			target, err := cm("gc", "target")
			if err != nil {
				return err
			}
			elsewhere, err := cm("other", "elsewhere")
			if err != nil {
				return err
			}
			nonblocking, err := cm("gc", "hold-nonblocking")
			if err != nil {
				return err
			}
			blocking, err := cm("gc", "hold-blocking")
			if err != nil {
				return err
			}
			realms := map[string]types.UID{}
			for _, mode := range gcRealmModes {
				realm, err := dyn.Resource(gcRealms).Get(ctx, s.realm(mode), metav1.GetOptions{})
				if err != nil {
					return err
				}
				realms[mode] = realm.GetUID()
			}
			realmRef := func(mode string, block bool) metav1.OwnerReference {
				return gcRef(gcGroup+"/v1", "Realm", s.realm(mode), realms[mode], block)
			}
			hold := []string{nsHold}
			deps := []struct {
				ns, name   string
				ref        metav1.OwnerReference
				finalizers []string
			}{
				{"gc", "dangling", gcRef("v1", "ConfigMap", "ghost", gcNever, false), nil},
				{"gc", "mismatch", gcRef("v1", "ConfigMap", "target", gcNever, false), nil},
				{"gc", "wrongkind", gcRef("v1", "Secret", "target", target.UID, false), nil},
				{"gc", "unknownkind", gcRef(gcGroup+"/v1", "Nonexistent", "target", gcNever, false), nil},
				{"gc", "crossns", gcRef("v1", "ConfigMap", "elsewhere", elsewhere.UID, false), nil},
				{"gc", "target-dependent", gcRef("v1", "ConfigMap", "target", target.UID, true), nil},
				{"gc", "held-nonblocking", gcRef("v1", "ConfigMap", "hold-nonblocking", nonblocking.UID, false), hold},
				{"gc", "held-blocking", gcRef("v1", "ConfigMap", "hold-blocking", blocking.UID, true), hold},
				{"gc", "realm-bg-dependent", realmRef("bg", false), nil},
				{"other", "realm-bg-dependent", realmRef("bg", true), nil},
				{"gc", "realm-fg-dependent", realmRef("fg", true), nil},
				{"other", "realm-fg-dependent", realmRef("fg", false), nil},
				{"other", "realm-fg-held", realmRef("fg", true), hold},
				{"gc", "realm-orphan-dependent", realmRef("orphan", false), nil},
				{"other", "realm-orphan-dependent", realmRef("orphan", true), nil},
			}
			for _, d := range deps {
				if _, err := s.createCM(ctx, d.ns, d.name, []metav1.OwnerReference{d.ref}, d.finalizers); err != nil {
					return err
				}
			}
			return nil
		}},
		{name: "delete owners: background, foreground, orphan (Deployments, Gadgets, Realms), foreground with a held dependent (blockOwnerDeletion false, true)", do: func(ctx context.Context, s *side) error {
			dyn, err := dynamic.NewForConfig(s.f.Config)
			if err != nil {
				return err
			}
			policy := map[string]metav1.DeletionPropagation{"bg": metav1.DeletePropagationBackground,
				"fg": metav1.DeletePropagationForeground, "orphan": metav1.DeletePropagationOrphan}
			ns := s.ns["gc"]
			for mode, p := range policy {
				opts := metav1.DeleteOptions{PropagationPolicy: kptr.To(p)}
				if err := s.f.Client.AppsV1().Deployments(ns).Delete(ctx, "web-"+mode, opts); err != nil {
					return err
				}
				if err := dyn.Resource(gcGadgets).Namespace(ns).Delete(ctx, "gadget-"+mode, opts); err != nil {
					return err
				}
			}
			fg := metav1.DeleteOptions{PropagationPolicy: kptr.To(metav1.DeletePropagationForeground)}
			for _, name := range []string{"hold-nonblocking", "hold-blocking"} {
				if err := s.f.Client.CoreV1().ConfigMaps(ns).Delete(ctx, name, fg); err != nil {
					return err
				}
			}
			for mode, p := range policy {
				if err := dyn.Resource(gcRealms).Delete(ctx, s.realm(mode), metav1.DeleteOptions{PropagationPolicy: kptr.To(p)}); err != nil {
					return err
				}
			}
			return nil
		}},
		{name: "release the held dependents", do: func(ctx context.Context, s *side) error {
			for _, held := range []struct{ ns, name string }{{"gc", "held-nonblocking"}, {"gc", "held-blocking"}, {"other", "realm-fg-held"}} {
				if err := mergePatch(ctx, s.f.Client.CoreV1().ConfigMaps(s.ns[held.ns]), held.name, `{"metadata":{"finalizers":null}}`); err != nil {
					return err
				}
			}
			return nil
		}},
	}
}

func gcDeployment(name string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{Replicas: kptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: new(int64),
				Containers:                    []corev1.Container{{Name: "main", Image: imageV1}}}}},
	}
}

func gcRef(apiVersion, kind, name string, uid types.UID, block bool) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: uid, BlockOwnerDeletion: kptr.To(block)}
}

func (s *side) createCM(ctx context.Context, ns, name string, refs []metav1.OwnerReference, finalizers []string) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: refs, Finalizers: finalizers}}
	cm, err := s.f.Client.CoreV1().ConfigMaps(s.ns[ns]).Create(ctx, cm, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating ConfigMap %s/%s: %w", ns, name, err)
	}
	return cm, nil
}

func (s *side) createGadget(ctx context.Context, name string) (*unstructured.Unstructured, error) {
	dyn, err := dynamic.NewForConfig(s.f.Config)
	if err != nil {
		return nil, err
	}
	g := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": gcGroup + "/v1", "kind": "Gadget", "metadata": map[string]any{"name": name}}}
	return dyn.Resource(gcGadgets).Namespace(s.ns["gc"]).Create(ctx, g, metav1.CreateOptions{})
}

// ensureCRD creates a CRD (it stays) and waits until it is served.
func ensureCRD(ctx context.Context, dyn dynamic.Interface, group, kind, plural, scope string, gvr schema.GroupVersionResource, ns string) error {
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": plural + "." + group},
		"spec": map[string]any{
			"group": group, "scope": scope,
			"names": map[string]any{"plural": plural, "singular": strings.ToLower(kind), "kind": kind, "listKind": kind + "List"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
		},
	}}
	if _, err := dyn.Resource(nsCRDs).Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return pollCtx(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		_, err := dyn.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
		return err == nil, err
	})
}

// gcSnapshot reads both namespaces' ConfigMaps, Gadgets, Deployments, ReplicaSets and pods,
// the side's Realms, and the garbage collector's events. A step is done when every
// Deployment is available and nothing is being deleted but what a foreign finalizer
// holds (a held dependent, an owner in the foreground waiting for a blocking one).
func gcSnapshot(ctx context.Context, s *side) (view, error) {
	out := flat{}
	var pending notReady
	dyn, err := dynamic.NewForConfig(s.f.Config)
	if err != nil {
		return view{}, err
	}
	n := newNormaliser(s, []string{"web-bg", "web-fg", "web-orphan"}, nil)
	text := func(v string) string { return gcRSName.ReplaceAllString(n.text(v), "$1-<hash>") }
	// names maps the UIDs of the objects read to their normalised kind/name.
	names := map[types.UID]string{}
	type object struct {
		p   string
		obj metav1.Object
	}
	var objects []object
	held := false
	podsBy := map[string]int{}
	add := func(p string, o metav1.Object) {
		objects = append(objects, object{p, o})
		names[o.GetUID()] = p
	}
	var events eventSet
	events.withMessages = true
	for _, logical := range []string{"gc", "other"} {
		ns := s.ns[logical]
		cms, err := s.f.Client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return view{}, err
		}
		for i := range cms.Items {
			if c := &cms.Items[i]; c.Name != "kube-root-ca.crt" {
				add(logical+" ConfigMap/"+c.Name, c)
				held = held || slices.Contains(c.Finalizers, nsHold)
			}
		}
		gs, err := dyn.Resource(gcGadgets).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return view{}, err
		}
		for i := range gs.Items {
			add(logical+" Gadget/"+gs.Items[i].GetName(), &gs.Items[i])
		}
		deps, err := s.f.Client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return view{}, err
		}
		for i := range deps.Items {
			d := &deps.Items[i]
			add(logical+" Deployment/"+d.Name, d)
			if d.DeletionTimestamp == nil && d.Status.AvailableReplicas != *d.Spec.Replicas {
				pending = append(pending, "Deployment "+d.Name+" not available")
			}
		}
		rss, err := s.f.Client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return view{}, err
		}
		for i := range rss.Items {
			add(logical+" ReplicaSet/"+text(rss.Items[i].Name), &rss.Items[i])
		}
		pods, evs, err := s.podsAndEvents(ctx, ns)
		if err != nil {
			return view{}, err
		}
		for i := range pods {
			p := &pods[i]
			owner := "none"
			if ref := metav1.GetControllerOf(p); ref != nil {
				owner = ref.Kind + "/" + text(ref.Name)
			}
			podsBy[logical+" pods owned by "+owner]++
		}
		for i := range evs {
			ev := &evs[i]
			if ev.Source.Component == "deployment-controller" || ev.Source.Component == "replicaset-controller" ||
				ev.InvolvedObject.Kind == "Pod" {
				continue
			}
			obj := logical + " " + ev.InvolvedObject.Kind + "/" + text(ev.InvolvedObject.Name)
			events.add(obj, ev, func(m string) string { return gcUID.ReplaceAllString(text(m), "<uid>") })
		}
	}
	for _, mode := range gcRealmModes {
		realm, err := dyn.Resource(gcRealms).Get(ctx, s.realm(mode), metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return view{}, err
		default:
			add("Realm/"+text(realm.GetName()), realm)
		}
	}
	for p, c := range podsBy {
		out[p] = fmt.Sprint(c)
	}
	for _, o := range objects {
		out[o.p] = "exists"
		if ts := o.obj.GetDeletionTimestamp(); ts != nil {
			out[o.p] = "deleting"
			waits := slices.Contains(o.obj.GetFinalizers(), nsHold) ||
				((o.p == "gc ConfigMap/hold-blocking" || o.p == "Realm/"+text(s.realm("fg"))) && held)
			if !waits {
				pending = append(pending, o.p+" being deleted")
			}
		}
		if f := o.obj.GetFinalizers(); len(f) > 0 {
			out[o.p+" finalizers"] = strings.Join(f, ",")
		}
		for _, ref := range o.obj.GetOwnerReferences() {
			uid := "uid of nothing read"
			if name, ok := names[ref.UID]; ok {
				uid = "uid of " + name
			}
			out[o.p+" owner "+ref.APIVersion+" "+ref.Kind+"/"+text(ref.Name)] = fmt.Sprintf("controller=%s blockOwnerDeletion=%s %s",
				ptr(ref.Controller), ptr(ref.BlockOwnerDeletion), uid)
		}
	}
	events.put(out)
	return view{values: out, pending: pending, events: events.lines}, nil
}
