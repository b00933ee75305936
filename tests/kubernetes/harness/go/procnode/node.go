package main

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kubeletVersion is what the node reports: the control plane's version, so that
// version skew checks (kubectl, the operator) see a matching kubelet.
const kubeletVersion = "v1.34.4"

// describeNode fills in the Node object that virtual-kubelet registers: capacity (GPUs
// included: advertised, not present), labels and taints from the config, the kubelet
// endpoint the API server proxies logs, exec and port-forward to.
func describeNode(cfg *Config, nc *NodeConfig, n *corev1.Node) {
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	for k, v := range nc.Labels {
		n.Labels[k] = v
	}
	n.Labels["kubernetes.io/hostname"] = nc.Name
	n.Labels["kubernetes.io/os"] = "linux"
	n.Labels["kubernetes.io/arch"] = "amd64"
	delete(n.Labels, "kubernetes.io/role")
	for _, t := range nc.Taints {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
	}
	n.Spec.PodCIDR = cfg.PodCIDR
	n.Spec.PodCIDRs = []string{cfg.PodCIDR}
	capacity := corev1.ResourceList{}
	for k, v := range nc.Capacity {
		capacity[corev1.ResourceName(k)] = resource.MustParse(v)
	}
	n.Status.Capacity = capacity
	n.Status.Allocatable = capacity.DeepCopy()
	n.Status.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: hostIP},
		{Type: corev1.NodeHostName, Address: nc.Name},
	}
	n.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(nc.Port)
	n.Status.NodeInfo = corev1.NodeSystemInfo{
		KubeletVersion:          kubeletVersion,
		ContainerRuntimeVersion: "procnode://virtual-kubelet-v1.14.1",
		OperatingSystem:         "linux",
		Architecture:            "amd64",
		OSImage:                 "this machine (images are not pulled)",
	}
	now := metav1.Now()
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, LastHeartbeatTime: now, LastTransitionTime: now}}
	for _, kind := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure, corev1.NodeNetworkUnavailable} {
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{
			Type: kind, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficient", LastHeartbeatTime: now, LastTransitionTime: now,
		})
	}
}
