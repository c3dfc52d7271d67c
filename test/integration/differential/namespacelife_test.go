package differential

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The namespace-life scenario: what every namespace gets, the default ServiceAccount
// (serviceaccount) and kube-root-ca.crt (root-ca-cert-publisher), in a few new namespaces;
// then kube-root-ca.crt edited in one (its data, its annotation) and the default
// ServiceAccount deleted in another. Each side's CA bundle is its cluster's CA (pki/ca.crt:
// the reference kube-controller-manager's --root-ca-file, and the CA the kshard shards'
// kubeconfig trusts, which they publish without --root-ca-file), normalised to <cluster CA>.

const (
	nlRootCA      = "kube-root-ca.crt"
	nlEdited      = "edited"
	nlSADeleted   = "sa-deleted"
	nlUntouched   = "untouched"
	nlDefaultName = "default"
)

func TestDifferentialNamespaceLife(t *testing.T) {
	scenario{
		controllers: []string{"serviceaccount", "root-ca-cert-publisher"},
		namespaces:  []string{nlUntouched, nlEdited, nlSADeleted},
		steps:       namespaceLifeSteps(),
		snapshot:    namespaceLifeSnapshot,
	}.run(t)
}

// deletedSA remembers, per side, the UID of the default ServiceAccount the scenario
// deleted, to tell its replacement from it.
var deletedSA sync.Map // side name → types.UID

func namespaceLifeSteps() []step {
	var awaits []string
	for _, ns := range []string{nlUntouched, nlEdited, nlSADeleted} {
		awaits = append(awaits, "ServiceAccount <ns:"+ns+">/default ", "ConfigMap <ns:"+ns+">/"+nlRootCA+" ")
	}
	return []step{
		{name: "namespaces created", do: func(context.Context, *side) error { return nil }, awaits: awaits},
		{name: "kube-root-ca.crt edited", awaits: awaits, do: func(ctx context.Context, s *side) error {
			cms := s.f.Client.CoreV1().ConfigMaps(s.ns[nlEdited])
			cm, err := cms.Get(ctx, nlRootCA, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cm.Data = map[string]string{"ca.crt": "edited", "extra": "x"}
			cm.BinaryData = map[string][]byte{"blob": {1, 2}}
			delete(cm.Annotations, "kubernetes.io/description")
			cm.Annotations["team"] = "mine"
			cm.Labels = map[string]string{"team": "mine"}
			_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
			return err
		}},
		{name: "default ServiceAccount deleted", awaits: awaits, do: func(ctx context.Context, s *side) error {
			sas := s.f.Client.CoreV1().ServiceAccounts(s.ns[nlSADeleted])
			sa, err := sas.Get(ctx, nlDefaultName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			deletedSA.Store(s.name, sa.UID)
			return sas.Delete(ctx, nlDefaultName, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &sa.UID}})
		}},
	}
}

// namespaceLifeSnapshot reads each namespace's default ServiceAccount, kube-root-ca.crt
// and the events about ServiceAccounts and ConfigMaps. A step is done when every
// namespace has both and every kube-root-ca.crt holds the side's CA.
func namespaceLifeSnapshot(ctx context.Context, s *side) (view, error) {
	caFile := filepath.Join(s.f.ClusterDir(), "pki", "ca.crt")
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return view{}, fmt.Errorf("the cluster's CA: %w", err)
	}
	norm := newNormaliser(s, nil, nil)
	out := flat{}
	var pending notReady
	events := eventSet{withMessages: true}
	logical := make([]string, 0, len(s.ns))
	for l := range s.ns {
		logical = append(logical, l)
	}
	sort.Strings(logical)
	for _, l := range logical {
		ns := s.ns[l]
		sa, saErr := s.f.Client.CoreV1().ServiceAccounts(ns).Get(ctx, nlDefaultName, metav1.GetOptions{})
		cm, cmErr := s.f.Client.CoreV1().ConfigMaps(ns).Get(ctx, nlRootCA, metav1.GetOptions{})
		evs, evErr := s.f.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		for _, err := range []error{saErr, cmErr} {
			if err != nil && !apierrors.IsNotFound(err) {
				return view{}, err
			}
		}
		if evErr != nil {
			return view{}, evErr
		}
		if saErr == nil {
			p := "ServiceAccount <ns:" + l + ">/default "
			out[p+"exists"] = "true"
			putMap(out, p+"label ", sa.Labels, norm)
			putMap(out, p+"annotation ", sa.Annotations, norm)
			putOwners(out, p, sa.OwnerReferences, norm.text)
			out[p+"secrets"] = fmt.Sprint(len(sa.Secrets), " ", len(sa.ImagePullSecrets))
			out[p+"automountServiceAccountToken"] = ptr(sa.AutomountServiceAccountToken)
			if gone, ok := deletedSA.Load(s.name); ok && l == nlSADeleted {
				out[p+"is the deleted one"] = fmt.Sprint(sa.UID == gone.(types.UID))
				if sa.UID == gone.(types.UID) {
					pending = append(pending, "the deleted ServiceAccount is still there")
				}
			}
		} else {
			pending = append(pending, "no default ServiceAccount in "+l)
		}
		if cmErr == nil {
			p := "ConfigMap <ns:" + l + ">/" + nlRootCA + " "
			for k, v := range cm.Data {
				if v == string(ca) {
					v = "<cluster CA>"
				}
				out[p+"data "+k] = norm.text(v)
			}
			for k, v := range cm.BinaryData {
				out[p+"binaryData "+k] = fmt.Sprint(v)
			}
			putMap(out, p+"label ", cm.Labels, norm)
			putMap(out, p+"annotation ", cm.Annotations, norm)
			putOwners(out, p, cm.OwnerReferences, norm.text)
			if cm.Data["ca.crt"] != string(ca) || len(cm.Data) != 1 {
				pending = append(pending, fmt.Sprintf("%s/%s does not hold %s alone", l, nlRootCA, caFile))
			}
		} else {
			pending = append(pending, "no "+nlRootCA+" in "+l)
		}
		for i := range evs.Items {
			ev := &evs.Items[i]
			if k := ev.InvolvedObject.Kind; k == "ServiceAccount" || k == "ConfigMap" || k == "Namespace" {
				events.add("<ns:"+l+">/"+k+" "+norm.text(ev.InvolvedObject.Name), ev, norm.text)
			}
		}
	}
	events.put(out)
	return view{values: out, pending: pending, events: events.lines}, nil
}
