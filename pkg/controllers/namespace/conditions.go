package namespace

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
)

// conditionTypes are the namespace conditions the controller maintains, in the order
// upstream appends them.
var conditionTypes = []corev1.NamespaceConditionType{
	corev1.NamespaceDeletionDiscoveryFailure,
	corev1.NamespaceDeletionGVParsingFailure,
	corev1.NamespaceDeletionContentFailure,
	corev1.NamespaceContentRemaining,
	corev1.NamespaceFinalizersRemaining,
}

// okReasons and okMessages are upstream's reason and message of each condition when it
// is False (nothing wrong).
var (
	okReasons = map[corev1.NamespaceConditionType]string{
		corev1.NamespaceDeletionDiscoveryFailure: "ResourcesDiscovered",
		corev1.NamespaceDeletionGVParsingFailure: "ParsedGroupVersions",
		corev1.NamespaceDeletionContentFailure:   "ContentDeleted",
		corev1.NamespaceContentRemaining:         "ContentRemoved",
		corev1.NamespaceFinalizersRemaining:      "ContentHasNoFinalizers",
	}
	okMessages = map[corev1.NamespaceConditionType]string{
		corev1.NamespaceDeletionDiscoveryFailure: "All resources successfully discovered",
		corev1.NamespaceDeletionGVParsingFailure: "All legacy kube types successfully parsed",
		corev1.NamespaceDeletionContentFailure:   "All content successfully deleted, may be waiting on finalization",
		corev1.NamespaceContentRemaining:         "All content successfully removed",
		corev1.NamespaceFinalizersRemaining:      "All content-preserving finalizers finished",
	}
)

// conditionUpdater collects what one sync found and turns it into the namespace's
// conditions: a True condition for each problem, the False "ok" variant for the others.
type conditionUpdater struct {
	found         []corev1.NamespaceCondition
	contentErrors []error
}

// discoveryFailed records a discovery error (for client-go's ErrGroupDiscoveryFailed,
// with the number of failing groups).
func (u *conditionUpdater) discoveryFailed(err error) {
	msg := err.Error()
	var groups *discovery.ErrGroupDiscoveryFailed
	if errors.As(err, &groups) {
		msg = fmt.Sprintf("Discovery failed for some groups, %d failing: %v", len(groups.Groups), err)
	}
	u.found = append(u.found, trueCondition(corev1.NamespaceDeletionDiscoveryFailure, "DiscoveryFailed", msg))
}

// groupVersionFailed records a GroupVersion of discovery that did not parse.
func (u *conditionUpdater) groupVersionFailed(err error) {
	u.found = append(u.found, trueCondition(corev1.NamespaceDeletionGVParsingFailure, "GroupVersionParsingFailed", err.Error()))
}

// contentFailed records a failed deletion of one resource's content.
func (u *conditionUpdater) contentFailed(err error) {
	u.contentErrors = append(u.contentErrors, err)
}

// contentTotals records what remains: per resource, and per finalizer.
func (u *conditionUpdater) contentTotals(t totals) {
	if len(t.byResource) > 0 {
		var parts []string
		for gvr, n := range t.byResource {
			if n > 0 {
				parts = append(parts, fmt.Sprintf("%s.%s has %d resource instances", gvr.Resource, gvr.Group, n))
			}
		}
		sort.Strings(parts)
		u.found = append(u.found, trueCondition(corev1.NamespaceContentRemaining, "SomeResourcesRemain",
			"Some resources are remaining: "+strings.Join(parts, ", ")))
	}
	if len(t.byFinalizer) > 0 {
		var parts []string
		for f, n := range t.byFinalizer {
			if n > 0 {
				parts = append(parts, fmt.Sprintf("%s in %d resource instances", f, n))
			}
		}
		sort.Strings(parts)
		u.found = append(u.found, trueCondition(corev1.NamespaceFinalizersRemaining, "SomeFinalizersRemain",
			"Some content in the namespace has finalizers remaining: "+strings.Join(parts, ", ")))
	}
}

// update writes the collected conditions into ns's status, and the ok variant of every
// condition nothing was found for; it reports whether the status changed. The
// lastTransitionTime of a condition changes only with its status.
func (u *conditionUpdater) update(ns *corev1.Namespace) bool {
	if find(u.found, corev1.NamespaceDeletionContentFailure) == nil && len(u.contentErrors) > 0 {
		msgs := make([]string, 0, len(u.contentErrors))
		for _, e := range u.contentErrors {
			msgs = append(msgs, e.Error())
		}
		sort.Strings(msgs)
		u.found = append(u.found, trueCondition(corev1.NamespaceDeletionContentFailure, "ContentDeletionFailed",
			fmt.Sprintf("Failed to delete all resource types, %d remaining: %v", len(msgs), strings.Join(msgs, ", "))))
	}
	changed := false
	for _, t := range conditionTypes {
		want := find(u.found, t)
		if want == nil {
			ok := corev1.NamespaceCondition{Type: t, Status: corev1.ConditionFalse, LastTransitionTime: metav1.Now(),
				Reason: okReasons[t], Message: okMessages[t]}
			want = &ok
		}
		have := find(ns.Status.Conditions, t)
		switch {
		case have == nil:
			ns.Status.Conditions = append(ns.Status.Conditions, *want)
			changed = true
		case have.Status != want.Status || have.Reason != want.Reason || have.Message != want.Message:
			if have.Status != want.Status {
				have.LastTransitionTime = metav1.Now()
			}
			have.Status, have.Reason, have.Message = want.Status, want.Reason, want.Message
			changed = true
		}
	}
	return changed
}

func trueCondition(t corev1.NamespaceConditionType, reason, msg string) corev1.NamespaceCondition {
	return corev1.NamespaceCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now(), Reason: reason, Message: msg}
}

func find(cs []corev1.NamespaceCondition, t corev1.NamespaceConditionType) *corev1.NamespaceCondition {
	for i := range cs {
		if cs[i].Type == t {
			return &cs[i]
		}
	}
	return nil
}
