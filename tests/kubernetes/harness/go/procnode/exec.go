package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	utilexec "k8s.io/utils/exec"
)

// The kubelet API that the API server proxies: exec (and exec probes), port-forward
// and logs.

func insecureTLS() *tls.Config {
	return &tls.Config{InsecureSkipVerify: true} //nolint:gosec // probes, as the kubelet's
}

// exec runs argv inside the container's running process tree (its mount, network,
// UTS and PID namespaces) with the container's environment; it returns the exit code.
func (c *container) exec(ctx context.Context, argv []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	c.mu.Lock()
	pid, env, dir := c.initPID, c.env, c.spec.WorkingDir
	c.mu.Unlock()
	if pid == 0 {
		return 0, errdefs.NotFoundf("container %s is not running", c.spec.Name)
	}
	if len(argv) == 0 {
		return 0, errdefs.InvalidInput("no command")
	}
	if dir == "" {
		dir = "/"
	}
	target := strconv.Itoa(pid)
	args := []string{"--target", target, "--mount", "--net", "--uts", "--pid", "--wd=" + dir, "--"}
	cmd := exec.CommandContext(ctx, "nsenter", append(args, argv...)...)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	// A timed-out command goes with everything it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		if ctx.Err() != nil {
			return 0, fmt.Errorf("command timed out: %w", ctx.Err())
		}
		return exitErr.ExitCode(), nil
	}
	if err != nil {
		return 0, err
	}
	return 0, nil
}

func (pr *provider) container(namespace, podName, name string) (*container, error) {
	p := pr.lookup(namespace, podName)
	if p == nil {
		return nil, errdefs.NotFoundf("pod %s/%s is not on node %s", namespace, podName, pr.nodeName)
	}
	all := append(append([]*container(nil), p.containers...), p.inits...)
	if name == "" && len(p.containers) > 0 {
		return p.containers[0], nil
	}
	for _, c := range all {
		if c.spec.Name == name {
			return c, nil
		}
	}
	return nil, errdefs.NotFoundf("container %s is not valid for pod %s", name, podName)
}

// RunInContainer serves `kubectl exec` (without a TTY: there is no terminal here).
func (pr *provider) RunInContainer(ctx context.Context, namespace, podName, name string, cmd []string, attach api.AttachIO) error {
	c, err := pr.container(namespace, podName, name)
	if err != nil {
		return err
	}
	if attach.TTY() {
		return errdefs.InvalidInput("process nodes run exec without a TTY: leave out -t")
	}
	var stdin io.Reader
	if attach.Stdin() != nil {
		stdin = attach.Stdin()
	}
	var stdout, stderr io.Writer = io.Discard, io.Discard
	if attach.Stdout() != nil {
		stdout = attach.Stdout()
		defer attach.Stdout().Close()
	}
	if attach.Stderr() != nil {
		stderr = attach.Stderr()
		defer attach.Stderr().Close()
	}
	code, err := c.exec(ctx, cmd, stdin, stdout, stderr)
	if err != nil {
		return err
	}
	if code != 0 {
		return utilexec.CodeExitError{Err: fmt.Errorf("command terminated with exit code %d", code), Code: code}
	}
	return nil
}

func (pr *provider) AttachToContainer(context.Context, string, string, string, api.AttachIO) error {
	return errdefs.InvalidInput("attach is not supported on process nodes; use logs -f")
}

// PortForward connects the API server's stream to the pod's IP, as the kubelet's
// port-forward does inside the pod's network namespace.
func (pr *provider) PortForward(ctx context.Context, namespace, podName string, port int32, stream io.ReadWriteCloser) error {
	p := pr.lookup(namespace, podName)
	if p == nil {
		return errdefs.NotFoundf("pod %s/%s is not on node %s", namespace, podName, pr.nodeName)
	}
	defer stream.Close()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(p.ip.String(), strconv.Itoa(int(port))))
	if err != nil {
		return fmt.Errorf("port-forward to %s port %d: %w", podName, port, err)
	}
	defer conn.Close()
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(conn, stream)
		if tcp, ok := conn.(*net.TCPConn); ok {
			_ = tcp.CloseWrite()
		}
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(stream, conn)
		done <- struct{}{}
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return nil
}

// GetContainerLogs serves `kubectl logs` with its options (tail, since, timestamps,
// limit, follow, previous).
func (pr *provider) GetContainerLogs(ctx context.Context, namespace, podName, name string, opts api.ContainerLogOpts) (io.ReadCloser, error) {
	c, err := pr.container(namespace, podName, name)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	path, prev, exited := c.logPath, c.prevLog, c.exited
	c.mu.Unlock()
	if opts.Previous {
		if prev == "" {
			return nil, errdefs.InvalidInputf("previous terminated container %q in pod %q not found", name, podName)
		}
		path, exited = prev, nil
	}
	if path == "" {
		return nil, errdefs.InvalidInputf("container %q in pod %q is waiting to start: ContainerCreating", c.spec.Name, podName)
	}
	done := func() bool {
		if exited == nil {
			return true
		}
		select {
		case <-exited:
			return true
		default:
			return false
		}
	}
	return readLogs(ctx, path, opts, done)
}
