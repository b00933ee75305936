package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// Pods get a network namespace each (as under a real kubelet and CNI bridge plugin):
// a veth pair whose host end is on one bridge in the namespace procnode runs in. Ray
// binds 0.0.0.0 for several ports (dashboard, client server), so pods sharing one
// namespace would collide; with one each, every port is free in every pod and the
// pod's address is what Ray detects as its node IP (its default route's source).
//
// procnode only ever touches the namespace it is started in, and refuses to start in
// one with any interface besides loopback and its own: the tests run it in a
// namespace of their own (tests/netns.sh), never in the machine's.

const vethPrefix = "pn"

type network struct {
	bridge  string
	prefix  netip.Prefix
	gateway netip.Addr

	mu   sync.Mutex
	next netip.Addr
	used map[netip.Addr]bool
}

func run(ctx context.Context, stdin string, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// checkIsolated refuses a namespace with interfaces that are not ours: creating a
// bridge and addresses there would change the machine's own network.
func checkIsolated(bridge string) error {
	ifaces, err := net.Interfaces()
	if err != nil {
		return err
	}
	for _, iface := range ifaces {
		if iface.Name == "lo" || iface.Name == bridge || strings.HasPrefix(iface.Name, vethPrefix) {
			continue
		}
		return fmt.Errorf("procnode runs only in a network namespace of its own (the tests' "+
			"one, see tests/netns.sh), but this one has interface %q", iface.Name)
	}
	return nil
}

func newNetwork(ctx context.Context, cfg *Config) (*network, error) {
	if err := checkIsolated(cfg.Bridge); err != nil {
		return nil, err
	}
	prefix := netip.MustParsePrefix(cfg.PodCIDR).Masked()
	n := &network{
		bridge:  cfg.Bridge,
		prefix:  prefix,
		gateway: prefix.Addr().Next(),
		used:    map[netip.Addr]bool{},
	}
	n.next = n.gateway.Next()
	// Idempotent for a restarted procnode in the same namespace.
	_ = run(ctx, "", "ip", "link", "del", cfg.Bridge)
	// The bridge's address is set, not left to Linux: an unset one follows the lowest
	// of its ports' addresses, so deleting one pod's veth changed it, and every other
	// pod, whose neighbour entry for the gateway still held the old one, lost its
	// replies to the gateway's side until that entry expired (a request through the
	// hub's proxy to a notebook pod failed with ETIMEDOUT while another pod went).
	// The CNI bridge plugin sets it for the same reason.
	batch := fmt.Sprintf("link add %[1]s address %[6]s type bridge\n"+
		"addr add %[2]s/%[3]d dev %[1]s\n"+
		"addr add %[4]s/32 dev %[1]s\n"+
		"addr add %[5]s/32 dev %[1]s\n"+
		"link set %[1]s up\n"+
		"link set lo up\n",
		cfg.Bridge, n.gateway, prefix.Bits(), cfg.KubernetesServiceIP, cfg.DNSServiceIP,
		bridgeMAC(n.gateway))
	if err := run(ctx, batch, "ip", "-batch", "-"); err != nil {
		return nil, fmt.Errorf("setting up bridge %s: %w", cfg.Bridge, err)
	}
	return n, nil
}

// bridgeMAC is a locally administered address made from the gateway's IPv4 address:
// fixed for the bridge's life, and never a veth's (those are random).
func bridgeMAC(gateway netip.Addr) string {
	b := gateway.As4()
	return fmt.Sprintf("02:42:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3])
}

// allocate hands out the next free address; addresses are not reused until the
// range wraps, so a stale DNS answer never points at another pod.
func (n *network) allocate() (netip.Addr, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for range 1 << (32 - n.prefix.Bits()) {
		addr := n.next
		n.next = addr.Next()
		if !n.prefix.Contains(n.next) {
			n.next = n.gateway.Next()
		}
		if !n.used[addr] && n.prefix.Contains(addr) && addr != n.gateway {
			n.used[addr] = true
			return addr, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("pod network %s is full", n.prefix)
}

func (n *network) release(addr netip.Addr) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.used, addr)
}

// attach gives the network namespace of process pid an eth0 with addr, on the bridge.
func (n *network) attach(ctx context.Context, pid int, hostVeth string, addr netip.Addr) error {
	host := fmt.Sprintf("link add %[1]s type veth peer name eth0 netns %[2]d\n"+
		"link set %[1]s master %[3]s\n"+
		"link set %[1]s up\n", hostVeth, pid, n.bridge)
	if err := run(ctx, host, "ip", "-batch", "-"); err != nil {
		return err
	}
	pod := fmt.Sprintf("link set lo up\n"+
		"addr add %s/%d dev eth0\n"+
		"link set eth0 up\n"+
		"route add default via %s\n", addr, n.prefix.Bits(), n.gateway)
	return run(ctx, pod, "nsenter", fmt.Sprintf("--net=/proc/%d/ns/net", pid), "ip", "-batch", "-")
}

// relayAPIServer makes the "kubernetes" Service's ClusterIP answer in pods, as
// kube-proxy would: the in-tree autoscaler and in-cluster clients use
// KUBERNETES_SERVICE_HOST, and the API server's certificate names that IP.
func relayAPIServer(ctx context.Context, listen, target string) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				up, err := net.DialTimeout("tcp", target, 5*time.Second)
				if err != nil {
					log.Printf("kubernetes service relay: %v", err)
					return
				}
				defer up.Close()
				pipe(conn, up)
			}()
		}
	}()
	return nil
}

// pipe copies both ways until both directions are done, passing half-closes on.
func pipe(a, b net.Conn) {
	var wg sync.WaitGroup
	copyHalf := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if tcp, ok := dst.(*net.TCPConn); ok {
			_ = tcp.CloseWrite()
		} else {
			_ = dst.Close()
		}
	}
	wg.Add(2)
	go copyHalf(a, b)
	go copyHalf(b, a)
	wg.Wait()
}
