package main

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"net"
	"net/http"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Probes run for real, with the kubelet's defaults and thresholds: exec probes inside
// the container's namespaces, HTTP and TCP probes against the pod's IP. A startup
// probe holds the others back; failed liveness restarts the container; readiness is
// the container's Ready, and so the pod's.

func (c *container) probe(ctx context.Context) {
	if sp := c.spec.StartupProbe; sp != nil {
		if !c.loop(ctx, sp, "Startup", func(ok bool) bool {
			if ok {
				c.mu.Lock()
				c.started = true
				c.mu.Unlock()
				c.pod.notify()
				return false // done: hand over to liveness and readiness
			}
			c.kill(c.gracePeriod(), "startup probe failed")
			return false
		}) {
			return
		}
	}
	if rp := c.spec.ReadinessProbe; rp != nil {
		go c.loop(ctx, rp, "Readiness", func(ok bool) bool {
			c.mu.Lock()
			changed := c.ready != ok
			c.ready = ok
			c.mu.Unlock()
			if changed {
				// The moment it really changed, for latency benchmarks (epoch seconds).
				log.Printf("%s/%s: ready=%t at %.6f", c.pod.key(), c.spec.Name, ok,
					float64(time.Now().UnixNano())/1e9)
				c.pod.notify()
			}
			return true
		})
	}
	if lp := c.spec.LivenessProbe; lp != nil {
		go c.loop(ctx, lp, "Liveness", func(ok bool) bool {
			if !ok {
				log.Printf("%s/%s: liveness probe failed; restarting", c.pod.key(), c.spec.Name)
				c.kill(c.gracePeriod(), "liveness probe failed")
				return false
			}
			return true
		})
	}
}

func orDefault(v, d int32) int32 {
	if v <= 0 {
		return d
	}
	return v
}

// loop runs one probe every period; `result` hears each change of outcome once the
// thresholds are met and says whether to go on. It returns false if ctx ended.
func (c *container) loop(ctx context.Context, p *corev1.Probe, kind string, result func(bool) bool) bool {
	period := time.Duration(orDefault(p.PeriodSeconds, 10)) * time.Second
	timeout := time.Duration(orDefault(p.TimeoutSeconds, 1)) * time.Second
	success, failure := int(orDefault(p.SuccessThreshold, 1)), int(orDefault(p.FailureThreshold, 3))
	select {
	case <-ctx.Done():
		return false
	case <-time.After(time.Duration(p.InitialDelaySeconds) * time.Second):
	}
	oks, fails := 0, 0
	reported := -1 // nothing yet
	for {
		ok, detail := c.check(ctx, p, timeout)
		if ctx.Err() != nil {
			return false
		}
		if ok {
			oks, fails = oks+1, 0
		} else {
			oks, fails = 0, fails+1
			log.Printf("%s/%s: %s probe failed: %s", c.pod.key(), c.spec.Name, kind, detail)
		}
		state := -1
		if oks >= success {
			state = 1
		} else if fails >= failure {
			state = 0
		}
		if state >= 0 && (state != reported || kind == "Liveness") {
			reported = state
			if !result(state == 1) {
				return true
			}
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(period):
		}
	}
}

func (c *container) check(ctx context.Context, p *corev1.Probe, timeout time.Duration) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch {
	case p.Exec != nil:
		var out bytes.Buffer
		code, err := c.exec(ctx, p.Exec.Command, nil, &out, &out)
		if err != nil {
			return false, err.Error()
		}
		return code == 0, fmt.Sprintf("exit %d: %s", code, bytes.TrimSpace(out.Bytes()))
	case p.HTTPGet != nil:
		g := p.HTTPGet
		port, err := c.port(g.Port)
		if err != nil {
			return false, err.Error()
		}
		host := g.Host
		if host == "" {
			host = c.pod.ip.String()
		}
		scheme := "http"
		if g.Scheme == corev1.URISchemeHTTPS {
			scheme = "https"
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet,
			fmt.Sprintf("%s://%s%s", scheme, net.JoinHostPort(host, strconv.Itoa(port)), g.Path), nil)
		if err != nil {
			return false, err.Error()
		}
		req.Header.Set("User-Agent", "kube-probe/procnode")
		for _, h := range g.HTTPHeaders {
			req.Header.Set(h.Name, h.Value)
		}
		resp, err := probeClient.Do(req)
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode >= 200 && resp.StatusCode < 400, resp.Status
	case p.TCPSocket != nil:
		port, err := c.port(p.TCPSocket.Port)
		if err != nil {
			return false, err.Error()
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(c.pod.ip.String(), strconv.Itoa(port)))
		if err != nil {
			return false, err.Error()
		}
		conn.Close()
		return true, ""
	}
	return false, "unsupported probe (gRPC probes do not run on process nodes)"
}

// probeClient does not follow redirects to other hosts' checks, and skips TLS
// verification for HTTPS probes, as the kubelet does.
var probeClient = &http.Client{Transport: &http.Transport{TLSClientConfig: insecureTLS()}}

func (c *container) port(p intstr.IntOrString) (int, error) {
	if p.Type == intstr.Int {
		return p.IntValue(), nil
	}
	for _, cp := range c.spec.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("no port named %q", p.StrVal)
}
