package helm

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kshard/kshard/pkg/sharding/coordinatorrpc"
	"github.com/kshard/kshard/test/framework"
)

// netns is the real node's network namespace (hack/node.sh): pod IPs are reachable only
// from inside it.
const netns = "kshard-node"

// nodeDir is the real node's state folder (hack/node.sh), beside the cluster's.
func nodeDir() string {
	dir := os.Getenv("KSHARD_CLUSTER_DIR")
	if dir == "" {
		dir = filepath.Join(framework.RepoRoot(), "_output", "cluster")
	}
	return filepath.Join(dir, "node")
}

// inNode runs a command in the node's network namespace and returns its output.
func inNode(ctx context.Context, args ...string) ([]byte, error) {
	var out, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", netns}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out.Bytes(), nil
}

// podGet fetches http://<pod IP>:<port><path> from inside the node's network namespace.
func podGet(ctx context.Context, pod *corev1.Pod, port int, path string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := inNode(ctx, "curl", "-sS", "-o", "-", "-w", "\n%{http_code}", fmt.Sprintf("http://%s:%d%s", pod.Status.PodIP, port, path))
	if err != nil {
		return 0, nil, err
	}
	i := bytes.LastIndexByte(out, '\n')
	var code int
	_, _ = fmt.Sscanf(string(out[i+1:]), "%d", &code)
	return code, out[:i], nil
}

// assignments asks a coordinator pod for GET /assignments?partitions=true.
func assignments(ctx context.Context, coordinator *corev1.Pod, port int) (coordinatorrpc.Assignments, error) {
	var a coordinatorrpc.Assignments
	code, body, err := podGet(ctx, coordinator, port, "/assignments?partitions=true")
	if err != nil {
		return a, err
	}
	if code != 200 {
		return a, fmt.Errorf("GET /assignments of %s: %d %s", coordinator.Name, code, body)
	}
	return a, json.Unmarshal(body, &a)
}

// containerProcess finds the host pid of a container's first process: the process whose
// cgroup path names the container's ID (the node runs cgroupfs, one cgroup per container).
func containerProcess(containerID string) (int, error) {
	id := containerID[strings.Index(containerID, "://")+3:]
	procs, err := filepath.Glob("/proc/[0-9]*/cgroup")
	if err != nil {
		return 0, err
	}
	best := 0
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(data, []byte(id)) {
			continue
		}
		var pid int
		if _, err := fmt.Sscanf(strings.TrimPrefix(p, "/proc/"), "%d", &pid); err == nil && (best == 0 || pid < best) {
			best = pid // the container's init has the lowest pid of its cgroup here
		}
	}
	if best == 0 {
		return 0, fmt.Errorf("no process in the cgroup of container %s", id)
	}
	return best, nil
}

// processUser returns the real and effective uid of pid.
func processUser(pid int) (real, effective string, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if fs := strings.Fields(s.Text()); len(fs) >= 3 && fs[0] == "Uid:" {
			return fs[1], fs[2], nil
		}
	}
	return "", "", fmt.Errorf("no Uid line in /proc/%d/status", pid)
}

// rootReadOnly reports whether pid's root filesystem is mounted read-only.
func rootReadOnly(pid int) (bool, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		fs := strings.Fields(line)
		if len(fs) > 5 && fs[4] == "/" {
			return strings.Split(fs[5], ",")[0] == "ro", nil
		}
	}
	return false, fmt.Errorf("no / mount in /proc/%d/mountinfo", pid)
}

// podLogs returns the node's logs of a namespace's pods (hack/node.sh logs): the API
// server cannot reach the node's kubelet, so `kubectl logs` does not work there.
func podLogs(namespace string) string {
	out, err := exec.Command(filepath.Join(framework.RepoRoot(), "hack", "node.sh"), "logs", namespace).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("hack/node.sh logs %s: %v\n%s", namespace, err, out)
	}
	return string(out)
}

// projectedToken reads the token the kubelet projected into a pod's volume: the shard's
// own credentials, as its container reads them.
func projectedToken(t testing.TB, pod *corev1.Pod, volume string) string {
	t.Helper()
	p := filepath.Join(nodeDir(), "kubelet", "pods", string(pod.UID), "volumes", "kubernetes.io~projected", volume, "token")
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("the token of pod %s: %v", pod.Name, err)
	}
	return strings.TrimSpace(string(data))
}
