package main

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
)

// Config is what the test harness writes for one procnode process (JSON).
type Config struct {
	Kubeconfig string `json:"kubeconfig"`
	// StateDir holds each pod's files: volumes, /tmp, logs.
	StateDir string `json:"stateDir"`
	// ImageBin is put first on every container's PATH: the image is never pulled,
	// containers run this machine's programs (the test venv's python and ray).
	ImageBin string `json:"imageBin"`
	// ImagePaths are host folders the "image" is made of (the test venv, an editable
	// checkout) that stay visible in a container even where they lie under a folder the
	// container gets privately (/tmp, /home): a checkout under /tmp must still run Ray.
	ImagePaths []string `json:"imagePaths"`
	// Binary is this program's own path, re-executed as each container's init.
	Binary string `json:"binary"`
	// APIServer is host:port of the real API server; pods reach it at the
	// "kubernetes" Service's ClusterIP, which procnode relays (a one-Service kube-proxy).
	APIServer string `json:"apiServer"`
	// KubernetesServiceIP and DNSServiceIP are ClusterIPs procnode answers on itself.
	KubernetesServiceIP string `json:"kubernetesServiceIP"`
	DNSServiceIP        string `json:"dnsServiceIP"`
	ClusterDomain       string `json:"clusterDomain"`
	// PodCIDR is the bridge's network; its first address is the pods' gateway.
	PodCIDR string `json:"podCIDR"`
	Bridge  string `json:"bridge"`
	// TLS of the kubelet API the API server calls (mutual TLS with ClientCA).
	TLSCert  string `json:"tlsCert"`
	TLSKey   string `json:"tlsKey"`
	ClientCA string `json:"clientCA"`
	// CgroupParent is a memory cgroup (v1) directory under which each container gets
	// one with its memory limit; "" leaves memory unlimited.
	CgroupParent string       `json:"cgroupParent"`
	Nodes        []NodeConfig `json:"nodes"`
}

// NodeConfig describes one Node object that this process plays the kubelet of.
type NodeConfig struct {
	Name     string            `json:"name"`
	Port     int               `json:"port"`
	Capacity map[string]string `json:"capacity"`
	Labels   map[string]string `json:"labels"`
	Taints   []TaintConfig     `json:"taints"`
}

type TaintConfig struct {
	Key    string `json:"key"`
	Value  string `json:"value"`
	Effect string `json:"effect"`
}

func loadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var cfg Config
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(cfg.Nodes) == 0 {
		return nil, fmt.Errorf("%s: no nodes", path)
	}
	if _, err := netip.ParsePrefix(cfg.PodCIDR); err != nil {
		return nil, fmt.Errorf("%s: podCIDR: %w", path, err)
	}
	if cfg.ClusterDomain == "" {
		cfg.ClusterDomain = "cluster.local"
	}
	if cfg.Bridge == "" {
		cfg.Bridge = "procbr0"
	}
	return &cfg, nil
}
