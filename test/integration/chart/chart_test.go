package chart

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	shardapp "github.com/kshard/kshard/cmd/shard/app"
	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/test/framework"
)

var update = flag.Bool("update", false, "rewrite the chart's generated files (files/permissions.yaml, templates/shard-fence.yaml) from the code")

func TestMain(m *testing.M) { framework.Main(m) }

func TestPermissionsTableIsCurrent(t *testing.T) {
	path := filepath.Join(ChartDir(), PermissionsTablePath)
	want := PermissionsTable()
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("%s is not what the controllers' Descriptors declare; regenerate it with\n"+
			"  go test ./test/integration/chart -run TestPermissionsTableIsCurrent -update\nwant:\n%s\ngot:\n%s", path, want, got)
	}
}

func TestHelmLint(t *testing.T) {
	for _, f := range CIValuesFiles(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			out, err := RunHelm(t, "lint", "--strict", ChartDir(), "--values", f)
			t.Logf("helm lint --strict --values %s:\n%s", filepath.Base(f), out)
			if err != nil || !strings.Contains(out, "0 chart(s) failed") {
				t.Fatalf("helm lint --strict failed: %v", err)
			}
		})
	}
}

// TestTemplate renders every values file and checks what the chart promises: hardened
// pods, labels, the coordinator Service, TLS wiring, the grace period, and the toggles.
func TestTemplate(t *testing.T) {
	dashboards, _ := filepath.Glob(filepath.Join(ChartDir(), "dashboards", "*.json"))
	tests := []struct {
		name           string
		file           string
		tls            bool
		generatedCerts bool
		serviceMonitor bool
		prometheusRule bool
		dashboards     bool
		pdbs           bool
		shardReplicas  int32
		controllers    string
	}{
		{name: "defaults", file: "default-values.yaml", tls: true, generatedCerts: true, dashboards: true, pdbs: true, shardReplicas: 3, controllers: "*"},
		{name: "mTLS off", file: "mtls-off-values.yaml", dashboards: true, pdbs: true, shardReplicas: 3, controllers: "*"},
		{name: "ServiceMonitor on", file: "servicemonitor-values.yaml", tls: true, generatedCerts: true, serviceMonitor: true, prometheusRule: true, dashboards: true, pdbs: true, shardReplicas: 3, controllers: "*"},
		{name: "controllers subset", file: "controllers-subset-values.yaml", tls: true, generatedCerts: true, dashboards: true, pdbs: true, shardReplicas: 5, controllers: "replicaset,deployment"},
		{name: "existing Secrets", file: "existing-secrets-values.yaml", tls: true, shardReplicas: 3, controllers: "*"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs, _ := Render(t, "kshard", "kshard-system", []string{filepath.Join(ChartDir(), "ci", tc.file)})
			for _, u := range objs {
				l := u.GetLabels()
				for _, k := range []string{"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/managed-by", "helm.sh/chart"} {
					if l[k] == "" {
						t.Errorf("%s %s lacks label %s", u.GetKind(), u.GetName(), k)
					}
				}
			}
			var coord, shard appsv1.Deployment
			Into(t, objs.Get(t, "Deployment", "kshard-coordinator"), &coord)
			Into(t, objs.Get(t, "Deployment", "kshard-shard"), &shard)
			if *coord.Spec.Replicas != 2 {
				t.Errorf("coordinator replicas = %d, want 2", *coord.Spec.Replicas)
			}
			if *shard.Spec.Replicas != tc.shardReplicas {
				t.Errorf("shard replicas = %d, want %d", *shard.Spec.Replicas, tc.shardReplicas)
			}
			// A cold start assigns partitions once every shard replica has joined.
			if got, want := flagValue(coord.Spec.Template.Spec.Containers[0].Args, "--expected-shards"), strconv.Itoa(int(tc.shardReplicas)); got != want {
				t.Errorf("coordinator --expected-shards=%q, want %q (the shard replicas)", got, want)
			}
			for _, d := range []*appsv1.Deployment{&coord, &shard} {
				checkHardened(t, d)
				if len(d.Spec.Template.Spec.TopologySpreadConstraints) == 0 {
					t.Errorf("%s: no topology spread constraints", d.Name)
				}
			}
			shardArgs := shard.Spec.Template.Spec.Containers[0].Args
			leave, err := time.ParseDuration(flagValue(shardArgs, "--leave-timeout"))
			if err != nil {
				t.Fatalf("shard --leave-timeout: %v", err)
			}
			if grace := time.Duration(*shard.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second; grace <= leave {
				t.Errorf("shard terminationGracePeriodSeconds %s does not exceed --leave-timeout %s", grace, leave)
			}
			if got := flagValue(shardArgs, "--controllers"); got != tc.controllers {
				t.Errorf("shard --controllers = %q, want %q", got, tc.controllers)
			}
			// The gRPC Service selects the coordinators, Ready once they have seen who
			// leads (/readyz without its leader check): a standby that is not Ready would
			// stall every rolling update and the disruption budget.
			var svc corev1.Service
			Into(t, objs.Get(t, "Service", "kshard-coordinator"), &svc)
			if svc.Spec.Selector["app.kubernetes.io/component"] != "coordinator" || svc.Spec.PublishNotReadyAddresses {
				t.Errorf("coordinator Service selector %v publishNotReady %t", svc.Spec.Selector, svc.Spec.PublishNotReadyAddresses)
			}
			if p := coord.Spec.Template.Spec.Containers[0].ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz?exclude=leader" {
				t.Errorf("coordinator readiness probe %+v, want GET /readyz?exclude=leader", p)
			}
			// Shards dial every replica, Ready or not, through the headless peers Service:
			// the leader's Service has no endpoint during a failover, until the new leader
			// is Ready and its endpoint propagated.
			var peers corev1.Service
			Into(t, objs.Get(t, "Service", "kshard-coordinator-peers"), &peers)
			if peers.Spec.ClusterIP != corev1.ClusterIPNone || !peers.Spec.PublishNotReadyAddresses ||
				!maps.Equal(peers.Spec.Selector, svc.Spec.Selector) || len(peers.Spec.Ports) != 1 || peers.Spec.Ports[0].TargetPort.String() != "grpc" {
				t.Errorf("coordinator peers Service: clusterIP %q publishNotReady %t selector %v ports %+v; want headless, every replica's gRPC port",
					peers.Spec.ClusterIP, peers.Spec.PublishNotReadyAddresses, peers.Spec.Selector, peers.Spec.Ports)
			}
			wantAddr := fmt.Sprintf("kshard-coordinator-peers.kshard-system.svc:%d", peers.Spec.Ports[0].Port)
			if got := flagValue(shardArgs, "--coordinator-address"); got != wantAddr {
				t.Errorf("shard --coordinator-address = %q, want %q", got, wantAddr)
			}
			objs.Get(t, "Service", "kshard-coordinator-metrics")
			objs.Get(t, "Service", "kshard-shard-metrics")
			if got := len(objs.Kind("PodDisruptionBudget")); (got == 2) != tc.pdbs {
				t.Errorf("%d PodDisruptionBudgets, want them: %t", got, tc.pdbs)
			}
			if got := len(objs.Kind("ServiceMonitor")) == 1; got != tc.serviceMonitor {
				t.Errorf("ServiceMonitor rendered: %t, want %t", got, tc.serviceMonitor)
			}
			if got := len(objs.Kind("PrometheusRule")) == 1; got != tc.prometheusRule {
				t.Errorf("PrometheusRule rendered: %t, want %t", got, tc.prometheusRule)
			}
			checkDashboards(t, objs, tc.dashboards, dashboards)
			checkShardAuth(t, objs, "kshard", "kshard-system", &coord, &shard)

			coordArgs := coord.Spec.Template.Spec.Containers[0].Args
			if !tc.tls {
				if !slices.Contains(shardArgs, "--grpc-insecure") || !slices.Contains(coordArgs, "--grpc-insecure") {
					t.Errorf("tls off but --grpc-insecure missing: shard %v coordinator %v", shardArgs, coordArgs)
				}
				if n := len(objs.Kind("Secret")); n != 0 {
					t.Errorf("tls off but %d Secrets rendered", n)
				}
				return
			}
			if flagValue(shardArgs, "--grpc-tls-ca-file") == "" || flagValue(coordArgs, "--grpc-tls-client-ca-file") == "" {
				t.Errorf("mutual TLS flags missing: shard %v coordinator %v", shardArgs, coordArgs)
			}
			coordSecret := coord.Spec.Template.Spec.Volumes[0].Secret.SecretName
			shardSecret := shard.Spec.Template.Spec.Volumes[0].Secret.SecretName
			if !tc.generatedCerts {
				if coordSecret != "kshard-coordinator-cert" || shardSecret != "kshard-shard-cert" || len(objs.Kind("Secret")) != 0 {
					t.Errorf("existing Secrets: volumes use %q and %q, %d Secrets rendered", coordSecret, shardSecret, len(objs.Kind("Secret")))
				}
				return
			}
			var cs, ss corev1.Secret
			Into(t, objs.Get(t, "Secret", coordSecret), &cs)
			Into(t, objs.Get(t, "Secret", shardSecret), &ss)
			checkGeneratedCerts(t, &cs, &ss, flagValue(shardArgs, "--grpc-tls-server-name"))
		})
	}
}

func checkHardened(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	ps := d.Spec.Template.Spec.SecurityContext
	if ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.SeccompProfile == nil || ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: pod security context not hardened: %+v", d.Name, ps)
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		sc := c.SecurityContext
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("%s/%s: container security context not hardened: %+v", d.Name, c.Name, sc)
		}
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("%s/%s: resources not set: %+v", d.Name, c.Name, c.Resources)
		}
		if c.Image != "kshard/kshard:0.1.0" {
			t.Errorf("%s/%s: image %q", d.Name, c.Name, c.Image)
		}
	}
}

func checkDashboards(t *testing.T, objs Objects, enabled bool, files []string) {
	t.Helper()
	cms := objs.Kind("ConfigMap")
	if !enabled || len(files) == 0 {
		if len(cms) != 0 {
			t.Errorf("dashboards ConfigMap rendered though disabled or no dashboards/*.json")
		}
		return
	}
	var cm corev1.ConfigMap
	Into(t, objs.Get(t, "ConfigMap", "kshard-dashboards"), &cm)
	if cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboards ConfigMap labels %v lack grafana_dashboard=1", cm.Labels)
	}
	for _, f := range files {
		want, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if got := cm.Data[filepath.Base(f)]; strings.TrimSpace(got) != strings.TrimSpace(string(want)) {
			t.Errorf("dashboards ConfigMap key %s differs from %s", filepath.Base(f), f)
		}
	}
}

// checkGeneratedCerts proves the chart's certificates work as mTLS: the coordinator's
// verifies for the name shards expect, the shard's as a client, both under the CA.
func checkGeneratedCerts(t *testing.T, coordinator, shard *corev1.Secret, serverName string) {
	t.Helper()
	pair := func(s *corev1.Secret) (*x509.Certificate, *x509.CertPool) {
		kp, err := tls.X509KeyPair(s.Data["tls.crt"], s.Data["tls.key"])
		if err != nil {
			t.Fatalf("Secret %s: %v", s.Name, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(s.Data["ca.crt"]) {
			t.Fatalf("Secret %s: no CA in ca.crt", s.Name)
		}
		return kp.Leaf, pool
	}
	server, pool := pair(coordinator)
	client, _ := pair(shard)
	if _, err := server.Verify(x509.VerifyOptions{DNSName: serverName, Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("coordinator certificate for %q: %v", serverName, err)
	}
	if _, err := client.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("shard client certificate: %v", err)
	}
}

// flagValue returns the value of --name=value in args ("" when absent).
func flagValue(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

// TestShardClusterRoleFollowsControllers renders the chart for several `controllers`
// values and compares the shard ClusterRole with what the shard checks at start for the
// same selection: the base plus the enabled controllers' Permissions, no more, no less.
func TestShardClusterRoleFollowsControllers(t *testing.T) {
	reg, err := controllers.NewRegistry(shardapp.Descriptors()...)
	if err != nil {
		t.Fatal(err)
	}
	selections := []controllers.Selection{{"*"}, reg.Names()}
	for _, n := range reg.Names() {
		selections = append(selections, controllers.Selection{n}, controllers.Selection{"*", n}, controllers.Selection{"*", "-" + n})
		// kube-controller-manager's canonical name names the controller too, and the
		// controller's first entry wins, in either form.
		if c, ok := controllers.NamesOf(n); ok && c.Canonical != n {
			selections = append(selections, controllers.Selection{c.Canonical}, controllers.Selection{"*", "-" + c.Canonical},
				controllers.Selection{"-" + c.Canonical, n, "*"}, controllers.Selection{c.Canonical, "-" + n})
		}
	}
	for _, sel := range selections {
		t.Run(strings.Join(sel, ","), func(t *testing.T) {
			set := make([]string, len(sel))
			for i, s := range sel {
				set[i] = "controllers[" + strconv.Itoa(i) + "]=" + s
			}
			objs, _ := Render(t, "kshard", "kshard-system", nil, set...)
			var role rbacv1.ClusterRole
			Into(t, objs.Get(t, "ClusterRole", "kshard-shard-kshard-system"), &role)
			got, err := GrantsOfRules(role.Rules)
			if err != nil {
				t.Fatal(err)
			}
			want := GrantsOfNeeds(shardapp.RequiredPermissions(reg.Enabled(sel)))
			if missing, extra := DiffGrants(want, got); len(missing)+len(extra) > 0 {
				t.Errorf("shard ClusterRole for controllers=%v: missing %v, beyond need %v", sel, missing, extra)
			}
		})
	}
}

// TestServerSideDryRun applies every rendered values set to the local control plane with
// `kubectl apply --dry-run=server` (with the ServiceMonitor and PrometheusRule CRDs
// installed).
func TestServerSideDryRun(t *testing.T) {
	f := framework.Get(t)
	for _, name := range []string{"servicemonitors", "prometheusrules"} {
		crd := "crd/" + name + ".monitoring.coreos.com"
		if _, err := runKubectl(t, f, "get", crd); err != nil {
			t.Cleanup(func() { kubectl(t, f, "delete", crd, "--ignore-not-found") })
		}
		kubectl(t, f, "apply", "--server-side", "--force-conflicts", "-f", filepath.Join("testdata", "monitoring.coreos.com_"+name+".yaml"))
		// Not `kubectl wait --for=condition=Established`: right after the create the CRD may
		// have no status.conditions yet, and kubectl wait then fails at once ("accessor
		// error: <nil>") instead of waiting; it failed make test so once.
		framework.Eventually(t, 60*time.Second, crd+" Established", func(context.Context) (bool, error) {
			out, err := runKubectl(t, f, "get", crd, "-o", `jsonpath={.status.conditions[?(@.type=="Established")].status}`)
			return err == nil && strings.TrimSpace(out) == "True", nil
		})
	}
	for _, file := range CIValuesFiles(t) {
		t.Run(filepath.Base(file), func(t *testing.T) {
			ns := f.Namespace(t, nil).Name
			_, raw := Render(t, "kshard", ns, []string{file})
			path := filepath.Join(t.TempDir(), "rendered.yaml")
			if err := os.WriteFile(path, raw, 0o644); err != nil {
				t.Fatal(err)
			}
			out := kubectl(t, f, "apply", "--dry-run=server", "-n", ns, "-f", path)
			t.Logf("kubectl apply --dry-run=server (%s):\n%s", filepath.Base(file), out)
		})
	}
}

// kubectl runs the cached kubectl against the local control plane and fails the test on error.
func kubectl(t testing.TB, f *framework.Framework, args ...string) string {
	t.Helper()
	out, err := runKubectl(t, f, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func runKubectl(t testing.TB, f *framework.Framework, args ...string) (string, error) {
	t.Helper()
	path, err := exec.Command(filepath.Join(framework.RepoRoot(), "hack", "tools.sh"), "path", "kubectl").Output()
	if err != nil {
		t.Fatalf("hack/tools.sh path kubectl: %v", err)
	}
	cmd := exec.Command(strings.TrimSpace(string(path)), append([]string{"--kubeconfig", f.Kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestUpgradeKeepsCertificates installs the chart into the local control plane with helm,
// upgrades it, and checks the generated certificates survived (lookup), so running shards
// and coordinators keep trusting each other across upgrades.
func TestUpgradeKeepsCertificates(t *testing.T) {
	f := framework.Get(t)
	ns := f.Namespace(t, nil).Name
	release := "upgrade"
	helm := func(args ...string) {
		t.Helper()
		out, err := RunHelm(t, append(args, "--kubeconfig", f.Kubeconfig, "--namespace", ns)...)
		if err != nil {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() {
		if out, err := RunHelm(t, "uninstall", release, "--kubeconfig", f.Kubeconfig, "--namespace", ns); err != nil {
			t.Errorf("helm uninstall: %v\n%s", err, out)
		}
	})
	certs := func() (string, string) {
		t.Helper()
		var out [2]string
		for i, n := range []string{release + "-kshard-coordinator-tls", release + "-kshard-shard-tls"} {
			s, err := f.Client.CoreV1().Secrets(ns).Get(t.Context(), n, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			out[i] = string(s.Data["tls.crt"])
		}
		return out[0], out[1]
	}
	helm("install", release, ChartDir())
	coord, shard := certs()
	helm("upgrade", release, ChartDir(), "--set", "shard.replicas=4")
	coord2, shard2 := certs()
	if coord != coord2 || shard != shard2 {
		t.Errorf("helm upgrade replaced the generated certificates")
	}
	d, err := f.Client.AppsV1().Deployments(ns).Get(t.Context(), release+"-kshard-shard", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *d.Spec.Replicas != 4 {
		t.Errorf("shard replicas after upgrade = %d, want 4", *d.Spec.Replicas)
	}
}
