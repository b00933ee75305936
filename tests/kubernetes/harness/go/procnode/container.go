package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Kubelet's restart back-off: 10 s, doubling to 5 min, forgotten after 10 min of
// running fine. The first restart is immediate.
const (
	backoffInitial = 10 * time.Second
	backoffMax     = 300 * time.Second
	backoffReset   = 10 * time.Minute
)

// One container of a pod: its runs (each a fresh process tree in a PID namespace of
// its own, under `procnode init`), its probes, its status.
type container struct {
	pod  *podRuntime
	spec *corev1.Container
	init bool

	mu       sync.Mutex
	state    corev1.ContainerState
	last     corev1.ContainerState
	restarts int32
	ready    bool
	started  bool
	gaveUp   bool // will not run again (policy, or the pod is going)
	env      []string
	initPID  int
	runDir   string
	cmd      *exec.Cmd
	exited   chan struct{}
	logs     *logWriter
	logPath  string
	prevLog  string
	killing  string // why the current run is being stopped ("" = not)
}

func newContainer(p *podRuntime, spec *corev1.Container, init bool) *container {
	reason := "ContainerCreating"
	if init || len(p.pod.Spec.InitContainers) > 0 {
		reason = "PodInitializing"
	}
	return &container{
		pod: p, spec: spec, init: init,
		state: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}},
	}
}

func (c *container) id(run int32) string {
	return fmt.Sprintf("procnode://%s-%s-%d", c.pod.pod.UID, c.spec.Name, run)
}

func (c *container) snapshot() corev1.ContainerStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	started := c.started
	cs := corev1.ContainerStatus{
		Name:                 c.spec.Name,
		State:                *c.state.DeepCopy(),
		LastTerminationState: *c.last.DeepCopy(),
		Ready:                c.ready && c.state.Running != nil,
		RestartCount:         c.restarts,
		Image:                c.spec.Image,
		// The image is never pulled: the container runs this machine's programs.
		ImageID: "procnode://image-not-pulled",
		Started: &started,
	}
	if c.state.Running != nil || c.state.Terminated != nil {
		cs.ContainerID = c.id(c.restarts)
	}
	return cs
}

func (c *container) setWaiting(reason, message string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state.Running == nil {
		c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}}
	}
}

func (c *container) policy() corev1.RestartPolicy {
	if c.init && c.pod.pod.Spec.RestartPolicy == corev1.RestartPolicyAlways {
		return corev1.RestartPolicyOnFailure // init containers never restart after success
	}
	return c.pod.pod.Spec.RestartPolicy
}

// willRestart: the container is down but will run again.
func (c *container) willRestart() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.gaveUp
}

// failedForGood: an init container that failed and will not be retried.
func (c *container) failedForGood() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gaveUp && c.state.Terminated != nil && c.state.Terminated.ExitCode != 0
}

// runToCompletion runs an init container until it succeeds (true), or until its
// policy gives up on it or the pod is deleted (false).
func (c *container) runToCompletion(env *envResolver, vols map[string]volume) bool {
	c.supervise(env, vols)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state.Terminated != nil && c.state.Terminated.ExitCode == 0
}

// supervise runs the container, restarting it as the policy says, with back-off.
func (c *container) supervise(env *envResolver, vols map[string]volume) {
	p := c.pod
	backoff := time.Duration(0)
	for {
		began := time.Now()
		code, err := c.runOnce(env, vols)
		if err != nil {
			// The container could not be made (bad env, volume, command): a kubelet
			// keeps it Waiting with the reason and retries.
			log.Printf("%s/%s: %v", p.key(), c.spec.Name, err)
			c.setWaiting("CreateContainerError", err.Error())
			p.notify()
			if !p.sleep(5 * time.Second) {
				c.giveUp()
				return
			}
			continue
		}
		restart := !p.stopping()
		switch c.policy() {
		case corev1.RestartPolicyNever:
			restart = false
		case corev1.RestartPolicyOnFailure:
			restart = restart && code != 0
		}
		if !restart {
			c.giveUp()
			p.notify()
			return
		}
		if time.Since(began) > backoffReset {
			backoff = 0
		}
		if backoff > 0 {
			c.mu.Lock()
			c.last = c.state
			c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
				Reason: "CrashLoopBackOff",
				Message: fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)",
					backoff, c.spec.Name, p.pod.Name, p.pod.Namespace, p.pod.UID),
			}}
			c.mu.Unlock()
			p.notify()
			if !p.sleep(backoff) {
				c.giveUp()
				return
			}
		}
		backoff = min(max(2*backoff, backoffInitial), backoffMax)
		c.mu.Lock()
		if c.state.Terminated != nil {
			c.last = c.state
		}
		c.restarts++
		c.mu.Unlock()
	}
}

func (c *container) giveUp() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gaveUp = true
}

// markTerminated makes a container that never ran, or was waiting, terminal (the pod
// is gone), as a kubelet reports containers of a deleted pod.
func (c *container) markTerminated() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gaveUp = true
	if c.state.Terminated == nil {
		c.state = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 137, Reason: "ContainerStatusUnknown",
			Message: "The container could not be located when the pod was terminated",
		}}
		if c.state.Running != nil {
			c.state.Terminated.Reason = "Error"
		}
	}
	c.ready = false
}

// command is what runs: command + args, expanded against the environment. With no
// command the image's entrypoint would run, which is unknown: it is never pulled.
func (c *container) command(env []string) ([]string, error) {
	if len(c.spec.Command) == 0 {
		return nil, fmt.Errorf("container %s has no command: process nodes do not pull "+
			"images, so they cannot run an image's entrypoint", c.spec.Name)
	}
	vars := envMap(env)
	var argv []string
	for _, a := range append(append([]string(nil), c.spec.Command...), c.spec.Args...) {
		argv = append(argv, expand(a, vars))
	}
	return argv, nil
}

// baseEnv is what the "image" sets: PATH with the test venv first, HOME, HOSTNAME.
func (c *container) baseEnv() map[string]string {
	return map[string]string{
		"PATH":     c.pod.prov.cfg.ImageBin + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME":     "/home/ray",
		"HOSTNAME": c.pod.pod.Name,
	}
}

// runOnce starts the container and waits for it to end; it returns the exit code, or
// an error if it could not be started at all.
func (c *container) runOnce(envr *envResolver, vols map[string]volume) (int, error) {
	p := c.pod
	if p.stopping() {
		return 137, nil
	}
	env, err := envr.containerEnv(p.ctx, c.spec, c.baseEnv())
	if err != nil {
		return 0, err
	}
	argv, err := c.command(env)
	if err != nil {
		return 0, err
	}
	mounts, err := p.mountsFor(c.spec, vols)
	if err != nil {
		return 0, err
	}
	c.mu.Lock()
	run := c.restarts
	c.mu.Unlock()
	dir := filepath.Join(p.dir, "containers", c.spec.Name, strconv.Itoa(int(run)))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	cgroup, err := c.makeCgroup(run)
	if err != nil {
		return 0, err
	}
	spec := initSpec{
		Argv: argv, Env: env, Dir: c.spec.WorkingDir, Mounts: mounts,
		Tmp:        filepath.Join(p.dir, "tmp"),
		Hosts:      filepath.Join(p.dir, "etc", "hosts"),
		Resolv:     filepath.Join(p.dir, "etc", "resolv.conf"),
		Hostname:   filepath.Join(p.dir, "etc", "hostname"),
		ImageBin:   p.prov.cfg.ImageBin,
		ImagePaths: p.prov.cfg.ImagePaths,
		CgroupDir:  cgroup,
		PidFile:    filepath.Join(dir, "pid"),
		ExitFile:   filepath.Join(dir, "exit"),
	}
	specPath := filepath.Join(dir, "spec.json")
	data, _ := json.Marshal(spec)
	if err := os.WriteFile(specPath, data, 0o600); err != nil {
		return 0, err
	}
	logs, err := newLogWriter(filepath.Join(dir, "log"))
	if err != nil {
		return 0, err
	}
	// nsenter joins the sandbox's network, UTS and mount namespaces; unshare gives the
	// container a mount namespace copied from the sandbox's and a PID namespace whose
	// init is procnode init (killed if unshare is).
	cmd := exec.Command("nsenter", p.sandboxNS("net"), p.sandboxNS("uts"), p.sandboxNS("mnt"), "--",
		"unshare", "--mount", "--pid", "--fork", "--kill-child=SIGKILL", "--propagation", "private", "--",
		p.prov.cfg.Binary, "init", specPath)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return 0, err
	}
	logs.pump("stdout", stdout)
	logs.pump("stderr", stderr)
	if err := cmd.Start(); err != nil {
		logs.close()
		return 0, err
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		// Wait only after the pipes are drained, as os/exec requires.
		logs.wg.Wait()
		waitErr = cmd.Wait()
		close(exited)
	}()
	initPID := waitPID(spec.PidFile, exited)
	startedAt := metav1.Now()
	c.mu.Lock()
	prev := c.logPath
	c.env, c.initPID, c.runDir, c.cmd, c.exited = env, initPID, dir, cmd, exited
	c.logs, c.logPath, c.prevLog, c.killing = logs, filepath.Join(dir, "log"), prev, ""
	c.state = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: startedAt}}
	c.ready = c.spec.ReadinessProbe == nil
	c.started = c.spec.StartupProbe == nil
	c.mu.Unlock()
	p.notify()
	go func() {
		// The pod deleted: stop this run within the deletion's grace period.
		select {
		case <-p.ctx.Done():
			c.kill(p.deleteGrace(), "")
		case <-exited:
		}
	}()

	probeCtx, stopProbes := context.WithCancel(p.ctx)
	if !c.init {
		go c.probe(probeCtx)
	}
	<-exited
	stopProbes()
	logs.close()
	code, message := readExit(spec.ExitFile, waitErr)
	reason := "Completed"
	if code != 0 {
		reason = "Error"
	}
	if oomKilled(cgroup) {
		reason = "OOMKilled"
	}
	if strings.HasPrefix(message, "failed to") {
		reason = "StartError"
	}
	if message == "" && code != 0 && c.spec.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError {
		message = logs.tail()
	}
	removeCgroup(cgroup)
	if code != 0 && !p.stopping() {
		log.Printf("%s/%s: exited %d (%s): %s", p.key(), c.spec.Name, code, reason, lastLine(logs.tail()))
	}
	c.mu.Lock()
	c.state = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: int32(code), Reason: reason, Message: message,
		StartedAt: startedAt, FinishedAt: metav1.Now(), ContainerID: c.id(run),
	}}
	c.ready, c.initPID = false, 0
	c.mu.Unlock()
	p.notify()
	return code, nil
}

func lastLine(text string) string {
	lines := strings.Split(strings.TrimSpace(text), "\n")
	return lines[len(lines)-1]
}

// waitPID reads the host PID that init writes as soon as it starts.
func waitPID(path string, exited <-chan struct{}) int {
	for {
		if data, err := os.ReadFile(path); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil {
				return pid
			}
		}
		select {
		case <-exited:
			return 0
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// readExit: init's own record of the command's exit (code, message), else what the
// process tree's end says (137 when init was SIGKILLed, with everything in it).
func readExit(path string, waitErr error) (int, string) {
	if data, err := os.ReadFile(path); err == nil {
		first, rest, _ := strings.Cut(strings.TrimSpace(string(data)), "\n")
		if code, err := strconv.Atoi(first); err == nil {
			return code, strings.TrimSpace(rest)
		}
	}
	var exitErr *exec.ExitError
	if errors.As(waitErr, &exitErr) {
		if status, ok := exitErr.Sys().(syscall.WaitStatus); ok && status.Signaled() {
			return 128 + int(status.Signal()), ""
		}
		if exitErr.ExitCode() == 0 {
			return 137, ""
		}
		return exitErr.ExitCode(), ""
	}
	return 137, ""
}

// kill stops the current run: SIGTERM to its init (which passes it on), SIGKILL to
// the whole PID namespace after the grace period.
func (c *container) kill(grace time.Duration, why string) {
	c.mu.Lock()
	pid, exited := c.initPID, c.exited
	if c.killing == "" {
		c.killing = why
	}
	running := c.state.Running != nil
	c.mu.Unlock()
	if !running || exited == nil {
		return
	}
	if pid > 0 {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	select {
	case <-exited:
		return
	case <-time.After(grace):
	}
	if pid > 0 {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	c.mu.Lock()
	cmd := c.cmd
	c.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	<-exited
}

func (c *container) gracePeriod() time.Duration {
	if g := c.pod.pod.Spec.TerminationGracePeriodSeconds; g != nil {
		return time.Duration(*g) * time.Second
	}
	return 30 * time.Second
}

// ---- memory cgroups (v1): the container's limit, seen by Ray and enforced

func (c *container) makeCgroup(run int32) (string, error) {
	parent := c.pod.prov.cfg.CgroupParent
	if parent == "" {
		return "", nil
	}
	dir := filepath.Join(parent, string(c.pod.pod.UID), fmt.Sprintf("%s-%d", c.spec.Name, run))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("memory cgroup: %w", err)
	}
	if limit, ok := c.spec.Resources.Limits[corev1.ResourceMemory]; ok && !limit.IsZero() {
		if err := os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), []byte(strconv.FormatInt(limit.Value(), 10)), 0o644); err != nil {
			return "", fmt.Errorf("memory cgroup limit: %w", err)
		}
	}
	return dir, nil
}

func oomKilled(dir string) bool {
	if dir == "" {
		return false
	}
	data, err := os.ReadFile(filepath.Join(dir, "memory.oom_control"))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if count, ok := strings.CutPrefix(line, "oom_kill "); ok && strings.TrimSpace(count) != "0" {
			return true
		}
	}
	return false
}

func removeCgroup(dir string) {
	if dir == "" {
		return
	}
	// Empty once every process of the run has ended; retried briefly for stragglers.
	for range 50 {
		if err := os.Remove(dir); err == nil || os.IsNotExist(err) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = os.Remove(filepath.Dir(dir)) // the pod's, once its last container is done
}
