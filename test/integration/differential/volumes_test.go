package differential

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kptr "k8s.io/utils/ptr"

	"github.com/kshard/kshard/test/framework"
)

// The volumes scenario: the PVC protection and ephemeral volume controllers, with the
// garbage collector (which deletes an ephemeral claim with its pod). In one namespace:
// claims "plain" (no pod), "used" (named by the running pod "user"), "bound" (bound by the
// cluster's PV controller to a hostPath volume of the side's own, so that it carries the
// Unused condition), a claim "conflict-scratch" made by hand; pods "eph" (running, an
// ephemeral volume), "waiting" (never scheduled, an ephemeral volume) and "conflict" (never
// scheduled, an ephemeral volume whose claim name is taken: Warning FailedBinding). Then
// the finalizer is removed from "plain"; then "plain", "used" and "waiting-scratch" are
// deleted ("plain" and "waiting-scratch" go, the latter created again, "used" stays while
// "user" runs) and "user" starts naming nothing new while a pod "binder" names "bound";
// then the pods "user", "eph" and "binder" are deleted.
//
// Pods that name a Pending claim are bound to a kwok node by spec.nodeName (the scheduler
// places no pod of an unbound claim); "binder", of the Bound claim, is scheduled.
//
// Compared: the claims (exists or deleting, finalizers, owner references with whether the
// UID is the named pod's, labels, annotations, phase, the Unused condition's status and
// reason), the pods (phase, bound to a node, deleting), and the events of the two
// controllers and the garbage collector with their normalised messages.

const (
	volNS = "vol"
	// volLabel marks the sides' PersistentVolumes, deleted when the test ends.
	volLabel = "kshard.io/e2e-differential-volumes"
)

func TestDifferentialVolumes(t *testing.T) {
	t.Cleanup(func() {
		for _, f := range []*framework.Framework{framework.Upstream(t), framework.Get(t)} {
			err := f.Client.CoreV1().PersistentVolumes().DeleteCollection(context.Background(), metav1.DeleteOptions{},
				metav1.ListOptions{LabelSelector: volLabel})
			if err != nil {
				t.Logf("deleting the scenario's PersistentVolumes: %v", err)
			}
		}
	})
	scenario{
		controllers: []string{"pvc-protection", "ephemeral-volume", "garbagecollector"},
		namespaces:  []string{volNS},
		steps:       volumeSteps(),
		snapshot:    volumeSnapshot,
	}.run(t)
}

// volClass is the side's storage class of the claim "bound" and its volume: cluster-wide
// names carry the side's namespace, so that two sets of namespaces on one cluster
// (SelfCheckEnv) do not share them.
func (s *side) volClass() string { return "kshard-diff-" + s.ns[volNS] }

func volClaimSpec(class string) corev1.PersistentVolumeClaimSpec {
	return corev1.PersistentVolumeClaimSpec{
		AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		StorageClassName: kptr.To(class),
		Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceStorage: resource.MustParse("1Gi")}},
	}
}

func volTemplate() *corev1.PersistentVolumeClaimTemplate {
	return &corev1.PersistentVolumeClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "scratch"}, Annotations: map[string]string{"kshard.io/note": "ephemeral"}},
		Spec:       volClaimSpec(""),
	}
}

// volPod is a pod with volumes: a claim's name ("claim:<name>") or an ephemeral volume
// ("ephemeral:<volume>"); on names a kwok node ("" leaves it to the scheduler, "-" to
// no scheduler at all).
func volPod(name, on string, volumes ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
		TerminationGracePeriodSeconds: new(int64),
		Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		Containers:                    []corev1.Container{{Name: "app", Image: imageV1}},
	}}
	switch on {
	case "":
		p.Spec.NodeSelector = map[string]string{"type": "kwok"}
	case "-":
		p.Spec.SchedulerName = "kshard-diff-nobody"
	default:
		p.Spec.NodeName = on
	}
	for _, v := range volumes {
		kind, arg, _ := strings.Cut(v, ":")
		vol := corev1.Volume{Name: arg}
		switch kind {
		case "claim":
			vol.Name = "data"
			vol.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: arg}
		case "ephemeral":
			vol.Ephemeral = &corev1.EphemeralVolumeSource{VolumeClaimTemplate: volTemplate()}
		}
		p.Spec.Volumes = append(p.Spec.Volumes, vol)
	}
	return p
}

func volumeSteps() []step {
	return []step{
		{name: "create claims (plain, used, bound to a volume, one taking an ephemeral volume's name) and pods (user, eph, waiting, conflict)",
			awaits: []string{"Claim/eph-scratch ", "Claim/waiting-scratch ", "Claim/bound condition Unused",
				"Events of Pod/conflict: Warning FailedBinding from ephemeral_volume"},
			do: func(ctx context.Context, s *side) error {
				cs, ns := s.f.Client, s.ns[volNS]
				if err := pollCtx(ctx, defaultStepTimeout, func(ctx context.Context) (bool, error) {
					_, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
					return err == nil, nil
				}); err != nil {
					return fmt.Errorf("no default ServiceAccount: %w", err)
				}
				pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: s.volClass(), Labels: map[string]string{volLabel: "true"}}, Spec: corev1.PersistentVolumeSpec{
					Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
					AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					StorageClassName:              s.volClass(),
					PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
					PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/" + ns}},
				}}
				if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
					return err
				}
				for name, class := range map[string]string{"plain": "", "used": "", "bound": s.volClass(), "conflict-scratch": ""} {
					c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: volClaimSpec(class)}
					if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, c, metav1.CreateOptions{}); err != nil {
						return err
					}
				}
				for _, p := range []*corev1.Pod{
					volPod("user", "kwok-node-0", "claim:used"),
					volPod("eph", "kwok-node-1", "ephemeral:scratch"),
					volPod("waiting", "-", "ephemeral:scratch"),
					volPod("conflict", "-", "ephemeral:scratch"),
				} {
					if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
						return err
					}
				}
				return nil
			}},
		{name: "remove the protection finalizer from plain", do: func(ctx context.Context, s *side) error {
			return mergePatch(ctx, s.f.Client.CoreV1().PersistentVolumeClaims(s.ns[volNS]), "plain", `{"metadata":{"finalizers":null}}`)
		}},
		{name: "delete plain, used and waiting-scratch; a pod binder of the Bound claim",
			awaits: []string{"Claim/waiting-scratch ", "Pod/binder phase"},
			do: func(ctx context.Context, s *side) error {
				cs, ns := s.f.Client, s.ns[volNS]
				for _, name := range []string{"plain", "used", "waiting-scratch"} {
					if err := cs.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
						return err
					}
				}
				_, err := cs.CoreV1().Pods(ns).Create(ctx, volPod("binder", "", "claim:bound"), metav1.CreateOptions{})
				return err
			}},
		{name: "delete the pods user, eph and binder", do: func(ctx context.Context, s *side) error {
			for _, name := range []string{"user", "eph", "binder"} {
				if err := s.f.Client.CoreV1().Pods(s.ns[volNS]).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
					return err
				}
			}
			return nil
		}},
	}
}

// volEventSources are the components whose events the scenario compares: the ephemeral
// volume controller's, the garbage collector's (PVC protection records none). The PV
// controller's events about claims it cannot bind repeat with its resync, on both sides.
var volEventSources = []string{"ephemeral_volume", "garbage-collector-controller", "persistentvolumeclaim-protection-controller", "pvc-protection-controller"}

// volumeSnapshot reads the namespace's claims, pods and the controllers' events. A step is
// done when every pod bound to a node runs, every pod not being deleted has its ephemeral
// volumes' claims, every claim not being deleted has the finalizer, no claim is being
// deleted but one a pod bound to a node names, and a Bound claim has the Unused condition.
func volumeSnapshot(ctx context.Context, s *side) (view, error) {
	out := flat{}
	var pending notReady
	ns := s.ns[volNS]
	n := newNormaliser(s, nil, map[string]string{s.volClass(): "<class>"})
	cs := s.f.Client
	claims, err := cs.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return view{}, err
	}
	pods, evs, err := s.podsAndEvents(ctx, ns)
	if err != nil {
		return view{}, err
	}
	podUIDs := map[types.UID]string{}
	named := map[string]bool{} // claims a pod bound to a node names
	for i := range pods {
		p := &pods[i]
		podUIDs[p.UID] = p.Name
		pp := "Pod/" + p.Name
		out[pp+" phase"] = string(p.Status.Phase)
		out[pp+" bound to a node"] = fmt.Sprint(p.Spec.NodeName != "")
		if p.DeletionTimestamp != nil {
			out[pp+" deleting"] = "true"
			pending = append(pending, pp+" being deleted")
		}
		if p.Spec.NodeName != "" && p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodRunning {
			pending = append(pending, pp+" not running")
		}
		for _, v := range p.Spec.Volumes {
			switch {
			case v.PersistentVolumeClaim != nil && p.Spec.NodeName != "":
				named[v.PersistentVolumeClaim.ClaimName] = true
			case v.Ephemeral != nil && p.DeletionTimestamp == nil:
				name := p.Name + "-" + v.Name
				if !slices.ContainsFunc(claims.Items, func(c corev1.PersistentVolumeClaim) bool { return c.Name == name }) {
					pending = append(pending, "claim "+name+" of pod "+p.Name+" missing")
				}
				if p.Spec.NodeName != "" {
					named[name] = true
				}
			}
		}
	}
	for i := range claims.Items {
		c := &claims.Items[i]
		cp := "Claim/" + c.Name
		out[cp+" "] = "exists"
		out[cp+" phase"] = string(c.Status.Phase)
		if c.DeletionTimestamp != nil {
			out[cp+" "] = "deleting"
			if !named[c.Name] {
				pending = append(pending, cp+" being deleted")
			}
		} else if !slices.Contains(c.Finalizers, "kubernetes.io/pvc-protection") {
			pending = append(pending, cp+" without the protection finalizer")
		}
		if len(c.Finalizers) > 0 {
			out[cp+" finalizers"] = strings.Join(c.Finalizers, ",")
		}
		putMap(out, cp+" label ", c.Labels, n)
		for k, v := range c.Annotations {
			out[cp+" annotation "+k] = n.text(v)
		}
		for _, ref := range c.OwnerReferences {
			uid := "uid of nothing read"
			if name, ok := podUIDs[ref.UID]; ok {
				uid = "uid of Pod/" + name
			}
			out[cp+" owner "+ref.APIVersion+" "+ref.Kind+"/"+ref.Name] = fmt.Sprintf("controller=%s blockOwnerDeletion=%s %s",
				ptr(ref.Controller), ptr(ref.BlockOwnerDeletion), uid)
		}
		hasUnused := false
		for _, cond := range c.Status.Conditions {
			out[cp+" condition "+string(cond.Type)] = fmt.Sprintf("%s %s %q", cond.Status, cond.Reason, cond.Message)
			hasUnused = hasUnused || cond.Type == corev1.PersistentVolumeClaimUnused
		}
		if c.Status.Phase == corev1.ClaimBound && c.DeletionTimestamp == nil && !hasUnused {
			pending = append(pending, cp+" Bound without the Unused condition")
		}
	}
	var events eventSet
	events.withMessages = true
	for i := range evs {
		ev := &evs[i]
		if !slices.Contains(volEventSources, ev.Source.Component) {
			continue
		}
		events.add(ev.InvolvedObject.Kind+"/"+ev.InvolvedObject.Name, ev, n.text)
	}
	events.put(out)
	sort.Strings(pending)
	return view{values: out, pending: pending, events: events.lines}, nil
}
