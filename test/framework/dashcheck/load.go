//lint:file-ignore SA1019 the load writes a core/v1 Endpoints, deprecated but mirrored by kube-controller-manager (endpointslicemirroring).
package dashcheck

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers/testing/audit"
	"github.com/kshard/kshard/pkg/sharding/coordinatorrpc"
	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/test/framework"
)

// partitions is the partition count of the framework's kshards and of the chart.
const partitions = 4096

// LoadNamespace makes a namespace with an audited ConfigMap (the kshard-audit controller
// reconciles it every second), a one-replica Deployment (for the workload controllers), a
// one-replica ReplicationController (replicationcontroller),
// a one-pod Job with a TTL (job, and ttl-after-finished once kwok completes the pod), a
// CronJob (cronjob), a ResourceQuota (resourcequota; CollectAndCount gives it and the
// garbage collector work), a one-replica StatefulSet (statefulset), a DaemonSet whose node
// selector matches no node (daemonset, without a pod per node), a PodDisruptionBudget of
// the Deployment's pods (disruption), a claim no pod uses (pvc-protection), a Service of
// the Deployment's pods (endpointslice, endpoint), a Service without a selector with an
// Endpoints of its own (endpointslicemirroring) and a HorizontalPodAutoscaler of the
// Deployment (horizontalpodautoscaling, which syncs it every sync period whether or not
// metrics come), so that every controller's panels have data. RollOut gives the sets,
// the budget, the claim and the Endpoints work too.
func LoadNamespace(t testing.TB, f *framework.Framework) (string, error) {
	ns := f.Namespace(t, nil).Name
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe", Labels: map[string]string{audit.Label: "true"}}}
	if _, err := f.Client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		return ns, fmt.Errorf("creating configmap in %s: %w", ns, err)
	}
	d := framework.NewRollingDeployment("web", 1, intstr.FromInt32(1), intstr.FromInt32(0), "registry.example/web:1.0", nil)
	if _, err := f.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return ns, fmt.Errorf("creating deployment in %s: %w", ns, err)
	}
	rc := &corev1.ReplicationController{ObjectMeta: metav1.ObjectMeta{Name: "legacy"}, Spec: corev1.ReplicationControllerSpec{
		Replicas: ptr.To[int32](1), Selector: map[string]string{"app": "legacy"},
		Template: &corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "legacy"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/legacy:1.0"}}}},
	}}
	if _, err := f.Client.CoreV1().ReplicationControllers(ns).Create(ctx, rc, metav1.CreateOptions{}); err != nil {
		return ns, fmt.Errorf("creating replicationcontroller in %s: %w", ns, err)
	}
	pod := batchv1.JobSpec{
		TTLSecondsAfterFinished: ptr.To[int32](3600),
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "work", Image: "registry.example/work:1.0"}}}},
	}
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "objects"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"count/configmaps": resource.MustParse("1000")}}}
	if _, err := f.Client.CoreV1().ResourceQuotas(ns).Create(ctx, quota, metav1.CreateOptions{}); err != nil {
		return ns, fmt.Errorf("creating resourcequota in %s: %w", ns, err)
	}
	if err := createSetsBudgetAndClaim(ctx, f, ns); err != nil {
		return ns, err
	}
	if err := createServicesAndAutoscaler(ctx, f, ns); err != nil {
		return ns, err
	}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "once"}, Spec: pod}
	if _, err := f.Client.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		return ns, fmt.Errorf("creating job in %s: %w", ns, err)
	}
	cron := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "hourly"},
		Spec: batchv1.CronJobSpec{Schedule: "@hourly", JobTemplate: batchv1.JobTemplateSpec{Spec: pod}}}
	if _, err := f.Client.BatchV1().CronJobs(ns).Create(ctx, cron, metav1.CreateOptions{}); err != nil {
		return ns, fmt.Errorf("creating cronjob in %s: %w", ns, err)
	}
	return ns, nil
}

func CreateLoad(t testing.TB, f *framework.Framework, n int) []string {
	t.Helper()
	nss := make([]string, n)
	err := framework.Parallel(n, 8, func(i int) error {
		var err error
		nss[i], err = LoadNamespace(t, f)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return nss
}

// Owners answers which shard owns each of namespaces and which shards there are: from
// the leading coordinator's assignments, however the test reaches it.
type Owners func(ctx context.Context, namespaces []string) (owner map[string]string, shards []string, err error)

// LoadEveryShard adds namespaces (LoadNamespace) to nss until every shard owns at least
// one of them, so the per-shard panels see each shard work; it returns nss with the added.
func LoadEveryShard(t testing.TB, f *framework.Framework, owners Owners, nss []string) []string {
	t.Helper()
	ctx := context.Background()
	for len(nss) < 200 {
		owner, shards, err := owners(ctx, nss)
		if err != nil {
			t.Fatal(err)
		}
		per := map[string]int{}
		for _, ns := range nss {
			per[owner[ns]]++
		}
		idle := false
		for _, name := range shards {
			idle = idle || per[name] == 0
		}
		if !idle {
			t.Logf("the test's namespaces per shard: %v", per)
			return nss
		}
		ns, err := LoadNamespace(t, f)
		if err != nil {
			t.Fatal(err)
		}
		nss = append(nss, ns)
	}
	t.Fatal("200 namespaces and still a shard owns none of them")
	return nil
}

// PartitionOwners is Owners for a coordinator's assignments: the namespaces' partitions
// (partition.NewMap of the chart's and the framework's 4096) looked up in them.
func PartitionOwners(assignments func(context.Context) (coordinatorrpc.Assignments, error)) Owners {
	return func(ctx context.Context, nss []string) (map[string]string, []string, error) {
		pmap, err := partition.NewMap(partitions)
		if err != nil {
			return nil, nil, err
		}
		a, err := assignments(ctx)
		if err != nil {
			return nil, nil, err
		}
		byPartition := framework.Owners(a)
		owner := map[string]string{}
		for _, ns := range nss {
			owner[ns] = byPartition[uint32(pmap.For(ns))]
		}
		var shards []string
		for _, s := range a.Shards {
			shards = append(shards, s.Shard)
		}
		return owner, shards, nil
	}
}

// RollOut changes every test Deployment's, StatefulSet's and DaemonSet's image, labels
// the claim and adds a pod with a generic ephemeral volume named after image (which stays
// Pending: its claim is never bound), and waits until each Deployment's rollout is
// complete: API traffic, reconciles and queue activity on every shard after the
// scale-out (the budget's reconciles follow the Deployment's pods).
func RollOut(t testing.TB, f *framework.Framework, nss []string, image string) {
	t.Helper()
	ctx := context.Background()
	patch := []byte(`{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"` + image + `"}]}}}}`)
	label := []byte(`{"metadata":{"labels":{"kshard.io/dashcheck-image":"` + strings.NewReplacer("/", "_", ":", "_").Replace(image) + `"}}}`)
	err := framework.Parallel(len(nss), 8, func(i int) error {
		ns := nss[i]
		if _, err := f.Client.AppsV1().Deployments(ns).Patch(ctx, "web", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return err
		}
		if _, err := f.Client.AppsV1().StatefulSets(ns).Patch(ctx, "db", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return err
		}
		if _, err := f.Client.AppsV1().DaemonSets(ns).Patch(ctx, "agent", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return err
		}
		if _, err := f.Client.CoreV1().PersistentVolumeClaims(ns).Patch(ctx, "data", types.MergePatchType, label, metav1.PatchOptions{}); err != nil {
			return err
		}
		if _, err := f.Client.CoreV1().Endpoints(ns).Patch(ctx, "external", types.MergePatchType, label, metav1.PatchOptions{}); err != nil {
			return err
		}
		_, err := f.Client.CoreV1().Pods(ns).Create(ctx, ephemeralPod(image), metav1.CreateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 90*time.Second, "every test Deployment rolled out to the new image", func(ctx context.Context) (bool, error) {
		for _, ns := range nss {
			d, err := f.Client.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if err := framework.DeploymentComplete(d); err != nil {
				return false, fmt.Errorf("%s: %w", ns, err)
			}
		}
		return true, nil
	})
}

// CollectAndCount gives the garbage collector and ResourceQuota work in every test
// namespace, once per round: a ConfigMap owner deleted in the background (its dependent
// is collected: attempt to delete) and one deleted with orphan propagation (its
// dependent orphaned: attempt to orphan), and the namespace's quota's spec.hard changed
// (a full sync) while a counted ConfigMap deletion releases usage (replenishment). It
// waits until the dependents are collected and orphaned.
func CollectAndCount(t testing.TB, f *framework.Framework, nss []string, round int) {
	t.Helper()
	ctx := context.Background()
	cms := f.Client.CoreV1().ConfigMaps
	owned := func(ns, name string, owner *corev1.ConfigMap) error {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if owner != nil {
			cm.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}}
		}
		_, err := cms(ns).Create(ctx, cm, metav1.CreateOptions{})
		return err
	}
	// Quota admission charges every create on the namespace's quota, racing the quota
	// controller's status writes: a create or patch can meet a conflict, which a client
	// retries (kubectl does), upstream's controllers as kshard's.
	conflict := func(op func() error) error { return retry.OnError(retry.DefaultRetry, apierrors.IsConflict, op) }
	err := framework.Parallel(len(nss), 8, func(i int) error {
		ns := nss[i]
		hard := fmt.Sprintf(`{"spec":{"hard":{"count/configmaps":"%d"}}}`, 1000+round)
		if err := conflict(func() error {
			_, err := f.Client.CoreV1().ResourceQuotas(ns).Patch(ctx, "objects", types.MergePatchType, []byte(hard), metav1.PatchOptions{})
			return err
		}); err != nil {
			return err
		}
		for _, kind := range []string{"gc", "orphan"} {
			var owner *corev1.ConfigMap
			if err := conflict(func() error {
				var err error
				owner, err = cms(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-owner-%d", kind, round)}}, metav1.CreateOptions{})
				return err
			}); err != nil {
				return err
			}
			if err := conflict(func() error { return owned(ns, fmt.Sprintf("%s-dependent-%d", kind, round), owner) }); err != nil {
				return err
			}
			policy := metav1.DeletePropagationBackground
			if kind == "orphan" {
				policy = metav1.DeletePropagationOrphan
			}
			if err := cms(ns).Delete(ctx, owner.Name, metav1.DeleteOptions{PropagationPolicy: &policy}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 90*time.Second, "every test dependent collected or orphaned", func(ctx context.Context) (bool, error) {
		for _, ns := range nss {
			if _, err := cms(ns).Get(ctx, fmt.Sprintf("gc-dependent-%d", round), metav1.GetOptions{}); err == nil {
				return false, fmt.Errorf("%s/gc-dependent-%d still there", ns, round)
			}
			cm, err := cms(ns).Get(ctx, fmt.Sprintf("orphan-dependent-%d", round), metav1.GetOptions{})
			if err != nil || len(cm.OwnerReferences) > 0 {
				return false, fmt.Errorf("%s/orphan-dependent-%d not orphaned (%v)", ns, round, err)
			}
		}
		return true, nil
	})
}

// createServicesAndAutoscaler makes LoadNamespace's Service "web" of the Deployment's
// pods, Service "external" without a selector and its Endpoints (one address), and
// HorizontalPodAutoscaler "web" of the Deployment (1 to 2 replicas on CPU).
func createServicesAndAutoscaler(ctx context.Context, f *framework.Framework, ns string) error {
	ports := []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}
	for _, svc := range []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.ServiceSpec{Selector: map[string]string{framework.RolloutApp: "web"}, Ports: ports}},
		{ObjectMeta: metav1.ObjectMeta{Name: "external"}, Spec: corev1.ServiceSpec{Ports: ports}},
	} {
		if _, err := f.Client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating service %s in %s: %w", svc.Name, ns, err)
		}
	}
	ep := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: "external"}, Subsets: []corev1.EndpointSubset{{
		Addresses: []corev1.EndpointAddress{{IP: "192.0.2.10"}},
		Ports:     []corev1.EndpointPort{{Name: "http", Port: 8080, Protocol: corev1.ProtocolTCP}},
	}}}
	if _, err := f.Client.CoreV1().Endpoints(ns).Create(ctx, ep, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating endpoints in %s: %w", ns, err)
	}
	hpa := &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
		ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
		MinReplicas:    ptr.To[int32](1), MaxReplicas: 2,
		Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
			Name: corev1.ResourceCPU, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To[int32](80)}}}},
	}}
	if _, err := f.Client.AutoscalingV2().HorizontalPodAutoscalers(ns).Create(ctx, hpa, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating horizontalpodautoscaler in %s: %w", ns, err)
	}
	return nil
}

// createSetsBudgetAndClaim makes LoadNamespace's StatefulSet "db", DaemonSet "agent",
// PodDisruptionBudget "web" and claim "data" in ns.
func createSetsBudgetAndClaim(ctx context.Context, f *framework.Framework, ns string) error {
	template := func(app string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/" + app + ":1.0"}}}}
	}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db"}, Spec: appsv1.StatefulSetSpec{
		Replicas: ptr.To[int32](1), ServiceName: "db",
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}, Template: template("db")}}
	if _, err := f.Client.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating statefulset in %s: %w", ns, err)
	}
	agent := template("agent")
	agent.Spec.NodeSelector = map[string]string{"kshard.io/dashcheck-no-node": "true"}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent"}, Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}}, Template: agent}}
	if _, err := f.Client.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating daemonset in %s: %w", ns, err)
	}
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: policyv1.PodDisruptionBudgetSpec{
		MinAvailable: ptr.To(intstr.FromInt32(1)),
		Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{framework.RolloutApp: "web"}}}}
	if _, err := f.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating poddisruptionbudget in %s: %w", ns, err)
	}
	claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data"}, Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	if _, err := f.Client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating persistentvolumeclaim in %s: %w", ns, err)
	}
	return nil
}

// ephemeralPod is a pod named after image with one generic ephemeral volume
// (ephemeral-volume creates its claim).
func ephemeralPod(image string) *corev1.Pod {
	name := "scratch-" + strings.NewReplacer("/", "-", ":", "-", "_", "-").Replace(image)
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "app", Image: image}},
		Volumes: []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
			VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}}}}},
	}}
}
