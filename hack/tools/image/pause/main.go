// Command pause is the pod sandbox's process for the local cluster's real node
// (hack/node.sh), which cannot pull registry.k8s.io/pause: it holds the pod's namespaces
// open, reaps the zombies of a pod that shares its PID namespace, and exits on SIGINT
// or SIGTERM, as the upstream pause does.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
