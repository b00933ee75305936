package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// `procnode init SPEC` is each container's first process: PID 1 of a PID namespace of
// its own, in a mount namespace copied from its pod's sandbox (both made by
// util-linux unshare just before). It builds the container's view of the file system
// (the pod's private /tmp, its volumes, /etc/hosts and /etc/resolv.conf for cluster
// DNS, its own /dev/shm, /home, /run and /proc, its memory cgroup at
// /sys/fs/cgroup/memory so Ray sizes itself from the memory limit), then runs the
// container's command as its child. Like tini it forwards signals and reaps orphans;
// when the command exits, init exits with its status and the kernel ends every other
// process of the container, as when a real container's PID 1 ends.

type mountSpec struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"readOnly"`
}

type initSpec struct {
	Argv       []string    `json:"argv"`
	Env        []string    `json:"env"`
	Dir        string      `json:"dir"`
	Mounts     []mountSpec `json:"mounts"`
	Tmp        string      `json:"tmp"`
	Hosts      string      `json:"hosts"`
	Resolv     string      `json:"resolv"`
	Hostname   string      `json:"hostname"`
	ImageBin   string      `json:"imageBin"`
	ImagePaths []string    `json:"imagePaths"`
	CgroupDir  string      `json:"cgroupDir"`
	PidFile    string      `json:"pidFile"`
	ExitFile   string      `json:"exitFile"`
}

// Exit codes the runtime itself gives, as runc/containerd do.
const (
	exitStartError = 128 // the command could not be started
	exitInitError  = 126 // the container's file system could not be set up
)

// Mount points may be made only where the container has a private file system;
// elsewhere mkdir would change this machine's own directories.
var privateRoots = []string{"/tmp", "/home", "/run", "/mnt", "/dev/shm"}

func initMain(specPath string) {
	data, err := os.ReadFile(specPath)
	if err != nil {
		fmt.Fprintf(os.Stderr, "procnode init: %v\n", err)
		os.Exit(exitInitError)
	}
	var spec initSpec
	if err := json.Unmarshal(data, &spec); err != nil {
		fmt.Fprintf(os.Stderr, "procnode init: %v\n", err)
		os.Exit(exitInitError)
	}
	fail := func(code int, format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		fmt.Fprintln(os.Stderr, msg)
		_ = os.WriteFile(spec.ExitFile, []byte(fmt.Sprintf("%d\n%s\n", code, msg)), 0o644)
		os.Exit(code)
	}
	// /proc is still the sandbox's here, so "self" is this process's PID outside.
	self, err := os.Readlink("/proc/self")
	if err != nil {
		fail(exitInitError, "procnode init: %v", err)
	}
	if err := os.WriteFile(spec.PidFile, []byte(self+"\n"), 0o644); err != nil {
		fail(exitInitError, "procnode init: %v", err)
	}
	if spec.CgroupDir != "" {
		// "0": the writing process (all its threads), whatever its PID namespace.
		if err := os.WriteFile(filepath.Join(spec.CgroupDir, "cgroup.procs"), []byte("0"), 0o644); err != nil {
			fail(exitInitError, "procnode init: joining memory cgroup: %v", err)
		}
	}
	// Hold every host path the container needs by descriptor: the state folder may
	// itself be under /tmp, which the container's own /tmp is about to hide.
	held := func(path string) string {
		fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			fail(exitInitError, "procnode init: %s: %v", path, err)
		}
		return fmt.Sprintf("/proc/self/fd/%d", fd)
	}
	spec.Tmp, spec.Hosts, spec.Resolv, spec.Hostname = held(spec.Tmp), held(spec.Hosts), held(spec.Resolv), held(spec.Hostname)
	if spec.CgroupDir != "" {
		spec.CgroupDir = held(spec.CgroupDir)
	}
	for i := range spec.Mounts {
		spec.Mounts[i].Source = held(spec.Mounts[i].Source)
	}
	var image []mountSpec
	for _, path := range spec.ImagePaths {
		if underPrivate(resolve(path)) {
			image = append(image, mountSpec{Source: held(path), Target: path})
		}
	}
	// The image's folders go first, so the pod's own volumes land on top of them.
	spec.Mounts = append(image, spec.Mounts...)
	spec.ExitFile = filepath.Join(held(filepath.Dir(spec.ExitFile)), filepath.Base(spec.ExitFile))
	if err := setupFilesystem(&spec); err != nil {
		fail(exitInitError, "procnode init: %v", err)
	}
	raiseNofile()
	os.Exit(runChild(&spec, fail))
}

// raiseNofile gives the container what containerd would (1Mi open files), or as much
// as this machine allows: without CAP_SYS_RESOURCE the hard limit cannot rise, and
// KubeRay's `ulimit -n 65536` then prints "cannot modify limit" and Ray runs anyway.
func raiseNofile() {
	for _, n := range []uint64{1 << 20, 65536} {
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n}) == nil {
			return
		}
	}
	var limit syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &limit) == nil {
		limit.Cur = limit.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &limit)
	}
}

func mount(source, target, fstype string, flags uintptr, data string) error {
	if err := syscall.Mount(source, target, fstype, flags, data); err != nil {
		return fmt.Errorf("mount %s on %s: %w", source, target, err)
	}
	return nil
}

func bind(source, target string, readOnly bool) error {
	if err := mount(source, target, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return err
	}
	if readOnly {
		return mount("", target, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, "")
	}
	return nil
}

func underPrivate(path string) bool {
	for _, root := range privateRoots {
		if path == root || strings.HasPrefix(path, root+"/") {
			return true
		}
	}
	return false
}

// ensureTarget makes a mount point of the source's kind, only in private places.
func ensureTarget(source, target string) error {
	if _, err := os.Lstat(target); err == nil {
		return nil
	}
	if !underPrivate(target) {
		return fmt.Errorf("mountPath %s does not exist on this machine, and process nodes make "+
			"mount points only under %s (the image is this machine's file system)",
			target, strings.Join(privateRoots, ", "))
	}
	info, err := os.Stat(source)
	if err != nil {
		return err
	}
	if info.IsDir() {
		return os.MkdirAll(target, 0o755)
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	return os.WriteFile(target, nil, 0o644)
}

func setupFilesystem(spec *initSpec) error {
	for _, dir := range []string{"/run", "/home", "/mnt"} {
		if err := mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=755"); err != nil {
			return err
		}
	}
	if err := mount("shm", "/dev/shm", "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=1777,size=67108864"); err != nil {
		return err
	}
	if err := bind(spec.Tmp, "/tmp", false); err != nil {
		return err
	}
	// The Ray images' user home, whose shell profile puts Ray on PATH: KubeRay runs
	// `bash -lc`, and a login shell's /etc/profile resets PATH.
	home := "/home/ray"
	if err := os.MkdirAll(home, 0o755); err != nil {
		return err
	}
	profile := fmt.Sprintf("export PATH=%q:\"$PATH\"\n", spec.ImageBin)
	for _, name := range []string{".profile", ".bashrc"} {
		if err := os.WriteFile(filepath.Join(home, name), []byte(profile), 0o644); err != nil {
			return err
		}
	}
	for target, source := range map[string]string{
		"/etc/hosts": spec.Hosts, "/etc/resolv.conf": spec.Resolv, "/etc/hostname": spec.Hostname,
	} {
		if err := bind(source, target, false); err != nil {
			return err
		}
	}
	if spec.CgroupDir != "" {
		if err := bind(spec.CgroupDir, "/sys/fs/cgroup/memory", false); err != nil {
			return err
		}
	}
	// Parents before children, so a volume inside another one lands on top of it.
	mounts := append([]mountSpec(nil), spec.Mounts...)
	sort.SliceStable(mounts, func(i, j int) bool {
		return strings.Count(filepath.Clean(mounts[i].Target), "/") < strings.Count(filepath.Clean(mounts[j].Target), "/")
	})
	for _, m := range mounts {
		target := resolve(filepath.Clean(m.Target))
		if err := ensureTarget(m.Source, target); err != nil {
			return err
		}
		if err := bind(m.Source, target, m.ReadOnly); err != nil {
			return err
		}
	}
	// Last: this PID namespace's own /proc (ps, psutil and Ray read it).
	return mount("proc", "/proc", "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, "")
}

// resolve follows symlinks in the part of path that exists (/var/run is /run).
func resolve(path string) string {
	existing, rest := path, ""
	for existing != "/" {
		if _, err := os.Lstat(existing); err == nil {
			break
		}
		rest = filepath.Join(filepath.Base(existing), rest)
		existing = filepath.Dir(existing)
	}
	real, err := filepath.EvalSymlinks(existing)
	if err != nil {
		return path
	}
	return filepath.Join(real, rest)
}

func lookPath(argv0 string, env []string) (string, error) {
	if strings.Contains(argv0, "/") {
		return argv0, nil
	}
	path := envMap(env)["PATH"]
	for _, dir := range filepath.SplitList(path) {
		candidate := filepath.Join(dir, argv0)
		if info, err := os.Stat(candidate); err == nil && !info.IsDir() && info.Mode()&0o111 != 0 {
			return candidate, nil
		}
	}
	return "", fmt.Errorf("exec: %q: executable file not found in $PATH", argv0)
}

func runChild(spec *initSpec, fail func(int, string, ...any)) int {
	if len(spec.Argv) == 0 {
		fail(exitStartError, "no command specified")
	}
	path, err := lookPath(spec.Argv[0], spec.Env)
	if err != nil {
		fail(exitStartError, "failed to create containerd task: failed to start: %v", err)
	}
	signals := make(chan os.Signal, 16)
	signal.Notify(signals, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP,
		syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	dir := spec.Dir
	if dir == "" {
		dir = "/"
	}
	cmd := exec.Command(path, spec.Argv[1:]...)
	cmd.Args = spec.Argv
	cmd.Env, cmd.Dir = spec.Env, dir
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		fail(exitStartError, "failed to start container process: %v", err)
	}
	child := cmd.Process.Pid
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			_ = syscall.Kill(child, sig.(syscall.Signal))
			continue
		}
		// Reap everything that has ended: the command and any orphan handed to PID 1.
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if err != nil || pid <= 0 {
				break
			}
			if pid != child {
				continue
			}
			code := status.ExitStatus()
			if status.Signaled() {
				code = 128 + int(status.Signal())
			}
			_ = os.WriteFile(spec.ExitFile, []byte(strconv.Itoa(code)+"\n"), 0o644)
			return code
		}
	}
	return exitInitError
}

// `procnode pause NAME`: holds a pod's network, UTS and mount namespaces, as the
// pause container does, until it is killed.
func pauseMain(hostname string) {
	// Nothing mounted in the pod's namespace may reach this machine's.
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		fmt.Fprintf(os.Stderr, "procnode pause: %v\n", err)
		os.Exit(1)
	}
	if err := syscall.Sethostname([]byte(hostname)); err != nil {
		fmt.Fprintf(os.Stderr, "procnode pause: %v\n", err)
		os.Exit(1)
	}
	fmt.Println("ready")
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	<-signals
}
