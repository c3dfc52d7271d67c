// Command metrics-adapter is a test tool: the aggregated custom.metrics.k8s.io and
// external.metrics.k8s.io server of the local control planes (package
// test/metricsadapter), whose values tests set with annotations and ConfigMaps.
// hack/cluster.sh builds and starts it on loopback and registers it with APIServices.
// It authenticates nobody; never run it in a cluster.
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/kshard/kshard/test/metricsadapter"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "metrics-adapter:", err)
		os.Exit(1)
	}
}

func run() error {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the cluster whose objects hold the metrics")
	bind := flag.String("bind-address", "127.0.0.1", "address to serve HTTPS on")
	port := flag.Int("secure-port", 0, "port to serve HTTPS on")
	cert := flag.String("tls-cert-file", "", "serving certificate (PEM)")
	key := flag.String("tls-private-key-file", "", "serving certificate's key (PEM)")
	klog.InitFlags(nil)
	flag.Parse()
	if *port == 0 || *cert == "" || *key == "" || *kubeconfig == "" {
		return fmt.Errorf("--kubeconfig, --secure-port, --tls-cert-file and --tls-private-key-file are required")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return err
	}
	cfg.UserAgent = "kshard-metrics-adapter"
	cfg.QPS, cfg.Burst = 100, 200
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	server := &metricsadapter.Server{
		Dynamic: dyn,
		Client:  client,
		Mapper:  restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc)),
	}
	pair, err := tls.LoadX509KeyPair(*cert, *key)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	srv := &http.Server{
		Addr:              net.JoinHostPort(*bind, strconv.Itoa(*port)),
		Handler:           server.Handler(),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServeTLS("", "") }()
	klog.InfoS("Serving custom.metrics.k8s.io and external.metrics.k8s.io", "address", srv.Addr)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(shutdown)
	}
}
