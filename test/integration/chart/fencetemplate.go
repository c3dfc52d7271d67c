package chart

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/kshard/kshard/pkg/sharding/ownerrecord"
)

// ShardFenceTemplatePath is the chart's template of the server-side fence, generated from
// pkg/sharding/ownerrecord (ShardFenceTemplate):
//
//	go test ./test/integration/chart -run TestShardFenceTemplateIsCurrent -update
const ShardFenceTemplatePath = "templates/shard-fence.yaml"

// fenceSentinels are the names ShardFenceTemplate builds the policies with, each replaced
// by the template expression of the release's name (fenceTemplateNames).
var fenceSentinels = ownerrecord.PolicyParams{Name: "QQFENCEQQ", Namespace: "QQNSQQ", ServiceAccount: "QQSAQQ",
	PartitionLabel: "QQLABELQQ", ClusterPartition: "QQCLUSTERQQ", CoordinatorUser: "QQCOORDQQ"}

// fenceTemplateNames turns the sentinels into the template's variables (fenceTemplateHeader);
// the users first, which contain the namespace's.
var fenceTemplateNames = strings.NewReplacer(
	fenceSentinels.Username(), "{{ $shardUser }}",
	fenceSentinels.ProbeUser(), "{{ $probeUser }}",
	fenceSentinels.CoordinatorUser, "{{ $coordUser }}",
	fenceSentinels.PartitionLabel, "{{ $label }}",
	fenceSentinels.ClusterPartition, "{{ $clusterPartition }}",
	fenceSentinels.Namespace, "{{ .Release.Namespace }}",
	fenceSentinels.Name, "{{ $fence }}",
)

// fenceTemplateHeader opens the template: the fence is optional, and these are the names
// the policies splice in (what the coordinator's flags name: --shard-service-account,
// --shard-fence-partition-label, --shard-fence-policy, and its own ServiceAccount; the
// cluster partition follows from --partitions).
const fenceTemplateHeader = `{{- if .Values.shardFence.enabled }}
{{- $fence := include "kshard.shardFence.name" . }}
{{- $shardUser := printf "system:serviceaccount:%s:%s" .Release.Namespace (include "kshard.shard.serviceAccountName" .) }}
{{- $probeUser := printf "kshard:fence-probe:%s:%s" .Release.Namespace (include "kshard.shard.serviceAccountName" .) }}
{{- $coordUser := printf "system:serviceaccount:%s:%s" .Release.Namespace (include "kshard.coordinator.serviceAccountName" .) }}
{{- $label := .Values.shardFence.partitionLabel }}
{{- $clusterPartition := include "kshard.clusterPartition" . }}
`

// fenceTemplateWidth is about where ShardFenceTemplate folds a CEL expression.
const fenceTemplateWidth = 100

// ShardFenceTemplate returns the chart's fence template for what ownerrecord.Policies and
// Bindings build, keeping the comments that open each document of current (the template
// as it is): a policy and its binding per policy, CEL folded over lines (">-": YAML joins
// the lines with one space, so every expression is exactly the code's).
func ShardFenceTemplate(current string) (string, error) {
	comments := documentComments(current)
	policies, bindings := ownerrecord.Policies(fenceSentinels), ownerrecord.Bindings(fenceSentinels)
	var b strings.Builder
	b.WriteString(fenceTemplateHeader)
	doc := 0
	next := func() {
		if doc > 0 {
			b.WriteString("---\n")
		}
		if doc < len(comments) {
			b.WriteString(comments[doc])
		}
		doc++
	}
	for i := range policies {
		next()
		if err := writePolicy(&b, policies[i]); err != nil {
			return "", err
		}
		next()
		writeBinding(&b, bindings[i])
	}
	b.WriteString("{{- end }}\n")
	return b.String(), nil
}

// documentComments returns the comment lines that open each "---"-separated document of a
// template.
func documentComments(s string) []string {
	var out []string
	for _, doc := range strings.Split(s, "\n---\n") {
		var c strings.Builder
		for _, line := range strings.Split(doc, "\n") {
			if strings.HasPrefix(line, "{{-") && c.Len() == 0 {
				continue // the header
			}
			if !strings.HasPrefix(line, "#") {
				break
			}
			c.WriteString(line + "\n")
		}
		out = append(out, c.String())
	}
	return out
}

const fenceLabels = "  labels:\n    {{- include \"kshard.labels\" (dict \"ctx\" . \"component\" \"shard-fence\") | nindent 4 }}\n"

var (
	plainCEL  = regexp.MustCompile(`^[A-Za-z0-9_.]+$`)
	plainItem = regexp.MustCompile(`^[A-Za-z0-9.-]+$`)
)

func writePolicy(b *strings.Builder, p *admissionregistrationv1.ValidatingAdmissionPolicy) error {
	s := p.Spec
	fmt.Fprintf(b, "apiVersion: %s\nkind: ValidatingAdmissionPolicy\nmetadata:\n  name: %s\n", p.APIVersion, fenceTemplateNames.Replace(p.Name))
	b.WriteString(fenceLabels)
	b.WriteString("spec:\n")
	if s.ParamKind != nil || s.MatchConstraints == nil || len(s.MatchConstraints.ExcludeResourceRules) > 0 ||
		s.MatchConstraints.NamespaceSelector != nil || s.MatchConstraints.ObjectSelector != nil {
		return fmt.Errorf("policy %s: ShardFenceTemplate does not write params, selectors or excluded rules", p.Name)
	}
	fmt.Fprintf(b, "  failurePolicy: %s\n", *s.FailurePolicy)
	fmt.Fprintf(b, "  matchConstraints:\n    matchPolicy: %s\n    resourceRules:\n", *s.MatchConstraints.MatchPolicy)
	for _, r := range s.MatchConstraints.ResourceRules {
		ops := make([]string, len(r.Operations))
		for i, o := range r.Operations {
			ops[i] = string(o)
		}
		fmt.Fprintf(b, "      - apiGroups: %s\n        apiVersions: %s\n        operations: %s\n        resources: %s\n        scope: %s\n",
			flowList(r.APIGroups), flowList(r.APIVersions), flowList(ops), flowList(r.Resources), flowItem(string(*r.Scope)))
	}
	var err error
	cel := func(key, expr, indent string) {
		if err == nil {
			err = writeCEL(b, key, expr, indent)
		}
	}
	b.WriteString("  matchConditions:\n")
	for _, m := range s.MatchConditions {
		fmt.Fprintf(b, "    - name: %s\n", m.Name)
		cel("expression", m.Expression, "      ")
	}
	b.WriteString("  variables:\n")
	for _, v := range s.Variables {
		fmt.Fprintf(b, "    - name: %s\n", v.Name)
		cel("expression", v.Expression, "      ")
	}
	b.WriteString("  validations:\n")
	for _, v := range s.Validations {
		b.WriteString("    - ")
		cel("expression", v.Expression, "      ")
		fmt.Fprintf(b, "      message: %s\n", quote(fenceTemplateNames.Replace(v.Message)))
		cel("messageExpression", v.MessageExpression, "      ")
		if v.Reason != nil {
			fmt.Fprintf(b, "      reason: %s\n", *v.Reason)
		}
	}
	if len(s.AuditAnnotations) > 0 {
		b.WriteString("  auditAnnotations:\n")
		for _, a := range s.AuditAnnotations {
			fmt.Fprintf(b, "    - key: %s\n", a.Key)
			cel("valueExpression", a.ValueExpression, "      ")
		}
	}
	return err
}

func writeBinding(b *strings.Builder, bd *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	actions := make([]string, len(bd.Spec.ValidationActions))
	for i, a := range bd.Spec.ValidationActions {
		actions[i] = string(a)
	}
	fmt.Fprintf(b, "apiVersion: %s\nkind: ValidatingAdmissionPolicyBinding\nmetadata:\n  name: %s\n", bd.APIVersion, fenceTemplateNames.Replace(bd.Name))
	b.WriteString(fenceLabels)
	fmt.Fprintf(b, "spec:\n  policyName: %s\n  validationActions: %s\n", fenceTemplateNames.Replace(bd.Spec.PolicyName), flowList(actions))
}

// writeCEL writes key: expr, folded over lines at single spaces (the first line of a
// "- " list item is written after what b holds already). YAML's folding turns each line
// break back into the one space it replaced, so expr must have no run of spaces, no line
// break and no space at either end.
func writeCEL(b *strings.Builder, key, expr, indent string) error {
	if strings.Contains(expr, "  ") || strings.ContainsAny(expr, "\n\t") || strings.TrimSpace(expr) != expr {
		return fmt.Errorf("CEL %q: cannot fold it exactly (runs of spaces, tabs, line breaks or spaces at its ends)", expr)
	}
	if strings.HasSuffix(b.String(), "- ") {
		fmt.Fprintf(b, "%s:", key)
	} else {
		fmt.Fprintf(b, "%s%s:", indent, key)
	}
	if plainCEL.MatchString(expr) && len(expr) <= 80 {
		fmt.Fprintf(b, " %s\n", expr)
		return nil
	}
	b.WriteString(" >-\n")
	for _, line := range fold(expr, fenceTemplateWidth) {
		fmt.Fprintf(b, "%s  %s\n", indent, fenceTemplateNames.Replace(line))
	}
	return nil
}

// fold splits s at single spaces into lines of about width characters, preferring a
// break after && or || in the second half of a line.
func fold(s string, width int) []string {
	var lines []string
	for len(s) > width {
		p, pref := -1, -1
		for i := 0; i < len(s) && i <= width; i++ {
			if s[i] != ' ' {
				continue
			}
			p = i
			if i*100 >= width*55 && (strings.HasSuffix(s[:i], "&&") || strings.HasSuffix(s[:i], "||")) {
				pref = i
			}
		}
		switch {
		case pref >= 0:
			p = pref
		case p < 0:
			p = strings.IndexByte(s, ' ')
		}
		if p < 0 {
			break
		}
		lines = append(lines, s[:p])
		s = s[p+1:]
	}
	return append(lines, s)
}

func flowList(xs []string) string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = flowItem(x)
	}
	return "[" + strings.Join(out, ", ") + "]"
}

func flowItem(x string) string {
	if plainItem.MatchString(x) {
		return x
	}
	return quote(x)
}

// quote is a YAML double-quoted scalar (JSON's string syntax is one).
func quote(s string) string {
	var b strings.Builder
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	_ = e.Encode(s)
	return strings.TrimSuffix(b.String(), "\n")
}
