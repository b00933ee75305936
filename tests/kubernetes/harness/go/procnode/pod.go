package main

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// podRuntime runs one pod: a sandbox (network, UTS and mount namespaces held by a
// pause process), its init containers one after another, then its containers, each
// restarted as restartPolicy says, with the status a kubelet would report.
type podRuntime struct {
	prov   *provider
	client kubernetes.Interface
	pod    *corev1.Pod
	dir    string

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	mu           sync.Mutex
	ip           netip.Addr
	veth         string
	pause        *exec.Cmd
	sandboxReady bool
	initDone     bool
	started      time.Time
	inits        []*container
	containers   []*container
	terminating  bool
	grace        time.Duration
	// When each condition last changed, as the kubelet reports it: raylab and the
	// benchmarks read a pod's Ready transition time.
	transitions map[corev1.PodConditionType]corev1.PodCondition
}

func newPodRuntime(prov *provider, pod *corev1.Pod) *podRuntime {
	ctx, cancel := context.WithCancel(context.Background())
	p := &podRuntime{
		prov:    prov,
		client:  prov.client,
		pod:     pod.DeepCopy(),
		dir:     filepath.Join(prov.cfg.StateDir, "pods", string(pod.UID)),
		ctx:     ctx,
		cancel:  cancel,
		done:    make(chan struct{}),
		started: time.Now(),

		transitions: map[corev1.PodConditionType]corev1.PodCondition{},
	}
	for i := range p.pod.Spec.InitContainers {
		p.inits = append(p.inits, newContainer(p, &p.pod.Spec.InitContainers[i], true))
	}
	for i := range p.pod.Spec.Containers {
		p.containers = append(p.containers, newContainer(p, &p.pod.Spec.Containers[i], false))
	}
	return p
}

func (p *podRuntime) key() string { return p.pod.Namespace + "/" + p.pod.Name }

// sandboxNS is nsenter's flag for one of the sandbox's namespaces ("net", "uts", "mnt").
func (p *podRuntime) sandboxNS(kind string) string {
	flag := map[string]string{"mnt": "mount", "net": "net", "uts": "uts"}[kind]
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprintf("--%s=/proc/%d/ns/%s", flag, p.pause.Process.Pid, kind)
}

// run is the pod's life, from sandbox to the end of its last container.
func (p *podRuntime) run() {
	defer close(p.done)
	p.notify()
	for !p.stopping() {
		err := p.createSandbox()
		if err == nil {
			break
		}
		log.Printf("%s: sandbox: %v", p.key(), err)
		p.setWaiting("ContainerCreating", "failed to create pod sandbox: "+err.Error())
		p.destroySandbox()
		if !p.sleep(5 * time.Second) {
			return
		}
	}
	var vols map[string]volume
	var env *envResolver
	for !p.stopping() {
		var err error
		env = p.resolver()
		vols, err = p.prepareVolumes(p.ctx, env)
		if err == nil {
			break
		}
		log.Printf("%s: volumes: %v", p.key(), err)
		p.setWaiting("CreateContainerConfigError", err.Error())
		if !p.sleep(5 * time.Second) {
			return
		}
	}
	for _, c := range p.inits {
		if !c.runToCompletion(env, vols) {
			return // pod failed, or is being deleted
		}
	}
	p.mu.Lock()
	p.initDone = true
	p.mu.Unlock()
	p.notify()
	var wg sync.WaitGroup
	for _, c := range p.containers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.supervise(env, vols)
		}()
	}
	wg.Wait()
}

func (p *podRuntime) resolver() *envResolver {
	return &envResolver{
		client: p.client, pod: p.pod, podIP: p.ip.String(), hostIP: hostIP,
		secrets: map[string]*corev1.Secret{}, configMaps: map[string]*corev1.ConfigMap{},
	}
}

func (p *podRuntime) stopping() bool { return p.ctx.Err() != nil }

// sleep waits d unless the pod is being deleted (then false).
func (p *podRuntime) sleep(d time.Duration) bool {
	select {
	case <-p.ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

func (p *podRuntime) setWaiting(reason, message string) {
	for _, c := range append(append([]*container(nil), p.inits...), p.containers...) {
		c.setWaiting(reason, message)
	}
	p.notify()
}

func (p *podRuntime) createSandbox() error {
	for _, d := range []string{"tmp", "volumes", "containers", "etc"} {
		if err := os.MkdirAll(filepath.Join(p.dir, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.Chmod(filepath.Join(p.dir, "tmp"), 0o1777); err != nil {
		return err
	}
	ip, err := p.prov.net.allocate()
	if err != nil {
		return err
	}
	hostname := p.pod.Spec.Hostname
	if hostname == "" {
		hostname = p.pod.Name
	}
	if len(hostname) > 63 {
		hostname = hostname[:63]
	}
	pause := exec.Command(p.prov.cfg.Binary, "pause", hostname)
	pause.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWUTS | syscall.CLONE_NEWNS,
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL, // the pod goes with procnode, even on SIGKILL
	}
	out, err := pause.StdoutPipe()
	if err != nil {
		p.prov.net.release(ip)
		return err
	}
	pause.Stderr = os.Stderr
	if err := pause.Start(); err != nil {
		p.prov.net.release(ip)
		return err
	}
	p.mu.Lock()
	p.ip, p.pause = ip, pause
	p.veth = fmt.Sprintf("%s%08x", vethPrefix, p.prov.nextVeth())
	p.mu.Unlock()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		return fmt.Errorf("pause process: %q %v", line, err)
	}
	if err := p.prov.net.attach(p.ctx, pause.Process.Pid, p.veth, ip); err != nil {
		return err
	}
	if err := p.writeEtc(hostname); err != nil {
		return err
	}
	p.mu.Lock()
	p.sandboxReady = true
	p.mu.Unlock()
	p.notify()
	return nil
}

// writeEtc writes the files the kubelet manages for a pod: hosts with the pod's own
// name, and resolv.conf pointing at cluster DNS with the namespace's search path.
func (p *podRuntime) writeEtc(hostname string) error {
	domain := p.prov.cfg.ClusterDomain
	hosts := "# Kubernetes-managed hosts file (procnode).\n" +
		"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" +
		fmt.Sprintf("%s\t%s", p.ip, hostname)
	if sub := p.pod.Spec.Subdomain; sub != "" {
		hosts += fmt.Sprintf(" %s.%s.%s.svc.%s", hostname, sub, p.pod.Namespace, domain)
	}
	hosts += "\n"
	resolv := fmt.Sprintf("search %s.svc.%s svc.%s %s\nnameserver %s\noptions ndots:5\n",
		p.pod.Namespace, domain, domain, domain, p.prov.cfg.DNSServiceIP)
	files := map[string]string{"hosts": hosts, "resolv.conf": resolv, "hostname": hostname + "\n"}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(p.dir, "etc", name), []byte(text), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (p *podRuntime) destroySandbox() {
	p.mu.Lock()
	pause, ip := p.pause, p.ip
	p.pause, p.sandboxReady = nil, false
	p.mu.Unlock()
	if pause != nil {
		// The network namespace, its veth and the pod's tmpfs volumes go with it.
		_ = pause.Process.Kill()
		_ = pause.Wait()
	}
	if ip.IsValid() {
		p.prov.net.release(ip)
	}
}

// terminate stops every container (each gets the grace period, then SIGKILL), then
// the sandbox, and reports the pod's final status.
func (p *podRuntime) terminate(grace time.Duration) {
	p.mu.Lock()
	if p.terminating {
		p.mu.Unlock()
		return
	}
	p.terminating = true
	p.grace = grace
	p.mu.Unlock()
	p.cancel() // each running container stops itself within the grace period
	<-p.done
	for _, c := range append(append([]*container(nil), p.inits...), p.containers...) {
		c.markTerminated()
	}
	p.destroySandbox()
	if err := os.RemoveAll(p.dir); err != nil {
		log.Printf("%s: %v", p.key(), err)
	}
	p.notify()
}

func (p *podRuntime) deleteGrace() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.grace
}

func (p *podRuntime) notify() {
	p.prov.notify(p.snapshot())
}

// snapshot is the pod as the API should see it now.
func (p *podRuntime) snapshot() *corev1.Pod {
	pod := p.pod.DeepCopy()
	pod.Status = p.status()
	return pod
}

// condition keeps the time of the last change of each condition.
func (p *podRuntime) condition(kind corev1.PodConditionType, ok bool, reason string) corev1.PodCondition {
	status := corev1.ConditionFalse
	if ok {
		status, reason = corev1.ConditionTrue, ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	last, seen := p.transitions[kind]
	if !seen || last.Status != status {
		last = corev1.PodCondition{Type: kind, Status: status, LastTransitionTime: metav1.NewTime(time.Now())}
	}
	last.Reason = reason
	p.transitions[kind] = last
	return last
}

func (p *podRuntime) status() corev1.PodStatus {
	p.mu.Lock()
	ip, sandbox, initDone, terminating := p.ip, p.sandboxReady, p.initDone, p.terminating
	p.mu.Unlock()
	st := corev1.PodStatus{
		HostIP:    hostIP,
		HostIPs:   []corev1.HostIP{{IP: hostIP}},
		StartTime: &metav1.Time{Time: p.started},
		QOSClass:  p.pod.Status.QOSClass,
	}
	if ip.IsValid() && sandbox {
		st.PodIP = ip.String()
		st.PodIPs = []corev1.PodIP{{IP: st.PodIP}}
	}
	for _, c := range p.inits {
		st.InitContainerStatuses = append(st.InitContainerStatuses, c.snapshot())
	}
	ready, running, succeeded, failed := true, 0, 0, 0
	for _, c := range p.containers {
		cs := c.snapshot()
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
		ready = ready && cs.Ready
		switch {
		case cs.State.Running != nil:
			running++
		case cs.State.Terminated != nil && !c.willRestart():
			if cs.State.Terminated.ExitCode == 0 {
				succeeded++
			} else {
				failed++
			}
		default:
			if cs.RestartCount > 0 {
				running++ // restarting counts as running, as the kubelet counts it
			}
		}
	}
	initFailed := false
	for _, c := range p.inits {
		if c.failedForGood() {
			initFailed = true
		}
	}
	n := len(p.containers)
	switch {
	case initFailed || (failed > 0 && failed+succeeded == n):
		st.Phase = corev1.PodFailed
	case n > 0 && succeeded == n:
		st.Phase = corev1.PodSucceeded
	case initDone && running > 0:
		st.Phase = corev1.PodRunning
	default:
		st.Phase = corev1.PodPending
	}
	if terminating && (st.Phase == corev1.PodRunning || st.Phase == corev1.PodPending) {
		st.Phase = corev1.PodFailed
	}
	st.Conditions = []corev1.PodCondition{
		p.condition(corev1.PodReadyToStartContainers, sandbox, ""),
		p.condition(corev1.PodInitialized, initDone, "ContainersNotInitialized"),
		p.condition(corev1.ContainersReady, initDone && ready && n > 0, "ContainersNotReady"),
		p.condition(corev1.PodReady, initDone && ready && n > 0 && !terminating, "ContainersNotReady"),
		p.condition(corev1.PodScheduled, true, ""),
	}
	return st
}
