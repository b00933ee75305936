// procnode plays the kubelet of one or more Nodes of the test control plane and runs
// the pods bound to them as processes on this machine (a virtual-kubelet provider).
// Images are never pulled: a container runs its own command with this machine's
// programs (the test venv first on PATH). See tests/kubernetes/harness/README.md.
//
//	procnode run CONFIG.json   the node agent (as root, in the tests' network namespace)
//	procnode init SPEC.json    internal: a container's PID 1
//	procnode pause HOSTNAME    internal: holds a pod's namespaces
package main

import (
	"context"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/node"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	"github.com/virtual-kubelet/virtual-kubelet/node/nodeutil"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: procnode run CONFIG.json | init SPEC.json | pause HOSTNAME")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "init":
		initMain(os.Args[2])
	case "pause":
		pauseMain(os.Args[2])
	case "run":
		if err := runMain(os.Args[2]); err != nil {
			log.Fatalf("procnode: %v", err)
		}
	default:
		fmt.Fprintf(os.Stderr, "procnode: unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
}

func runMain(configPath string) error {
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	cfg, err := loadConfig(configPath)
	if err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()

	restConfig, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if err != nil {
		return err
	}
	restConfig.QPS, restConfig.Burst = 50, 100
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	network, err := newNetwork(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() { _ = run(context.Background(), "", "ip", "link", "del", cfg.Bridge) }()
	if err := relayAPIServer(ctx, net.JoinHostPort(cfg.KubernetesServiceIP, "443"), cfg.APIServer); err != nil {
		return fmt.Errorf("kubernetes service relay: %w", err)
	}

	factory := informers.NewSharedInformerFactory(client, 10*time.Minute)
	dns := &clusterDNS{
		domain:    cfg.ClusterDomain + ".",
		services:  factory.Core().V1().Services().Lister(),
		endpoints: factory.Discovery().V1().EndpointSlices().Lister(),
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	if err := dns.serve(ctx, net.JoinHostPort(cfg.DNSServiceIP, "53")); err != nil {
		return fmt.Errorf("cluster DNS: %w", err)
	}

	s := &shared{cfg: cfg, client: client, net: network}
	var providers []*provider
	var nodes []*nodeutil.Node
	for i := range cfg.Nodes {
		nc := &cfg.Nodes[i]
		prov := newProvider(s, nc.Name)
		n, err := newNode(cfg, nc, client, prov)
		if err != nil {
			return fmt.Errorf("node %s: %w", nc.Name, err)
		}
		providers = append(providers, prov)
		nodes = append(nodes, n)
	}
	nodeCtx, stopNodes := context.WithCancel(context.Background())
	defer stopNodes()
	for _, n := range nodes {
		go func() { _ = n.Run(nodeCtx) }()
	}
	for i, n := range nodes {
		if err := n.WaitReady(ctx, time.Minute); err != nil {
			return fmt.Errorf("node %s: %w", cfg.Nodes[i].Name, err)
		}
	}
	log.Printf("procnode: %d node(s) ready", len(nodes))
	select {
	case <-ctx.Done():
	case <-firstDone(nodes):
	}
	// Stopping: every pod's processes go now; their objects stay for the next agent.
	log.Printf("procnode: stopping")
	var wg sync.WaitGroup
	for _, prov := range providers {
		prov.closing.Store(true)
		wg.Add(1)
		go func() {
			defer wg.Done()
			prov.shutdown(2 * time.Second)
		}()
	}
	wg.Wait()
	stopNodes()
	for i, n := range nodes {
		if err := n.Err(); err != nil {
			return fmt.Errorf("node %s: %w", cfg.Nodes[i].Name, err)
		}
	}
	return nil
}

func firstDone(nodes []*nodeutil.Node) <-chan struct{} {
	out := make(chan struct{})
	var once sync.Once
	for _, n := range nodes {
		go func() {
			<-n.Done()
			once.Do(func() { close(out) })
		}()
	}
	return out
}

// streamTimeout bounds idle exec, attach and port-forward streams, as the kubelet's
// streamingConnectionIdleTimeout does (default 4 h).
const streamTimeout = 4 * time.Hour

func newNode(cfg *Config, nc *NodeConfig, client kubernetes.Interface, prov *provider) (*nodeutil.Node, error) {
	mux := http.NewServeMux()
	handler := portForwardMux(prov, streamTimeout, mux)
	newProvider := func(pc nodeutil.ProviderConfig) (nodeutil.Provider, node.NodeProvider, error) {
		describeNode(cfg, nc, pc.Node)
		return prov, nil, nil
	}
	return nodeutil.NewNode(nc.Name, newProvider,
		nodeutil.WithClient(client),
		func(c *nodeutil.NodeConfig) error {
			c.HTTPListenAddr = net.JoinHostPort(hostIP, fmt.Sprint(nc.Port))
			c.InformerResyncPeriod = time.Minute
			c.NumWorkers = 4
			// Env is resolved here, once the pod has its IP (status.podIP) and with
			// resourceFieldRef, which virtual-kubelet's own resolution skips.
			c.SkipDownwardAPIResolution = true
			// Both long: virtual-kubelet passes them to port-forward swapped, and a Ray
			// Client connection may sit idle while its user thinks.
			c.StreamIdleTimeout, c.StreamCreationTimeout = streamTimeout, streamTimeout
			// Mutual TLS is the authentication: only the API server holds a client
			// certificate from the test CA, so whoever presents one may do anything.
			c.Handler = api.InstrumentHandler(nodeutil.WithAuth(nodeutil.NoAuth(), handler))
			return nil
		},
		nodeutil.WithTLSConfig(
			nodeutil.WithKeyPairFromPath(cfg.TLSCert, cfg.TLSKey),
			nodeutil.WithCAFromPath(cfg.ClientCA),
		),
		nodeutil.AttachProviderRoutes(mux),
	)
}
