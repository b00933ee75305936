package main

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The environment of a container as a kubelet makes it: service variables, envFrom,
// then env in order, each value expanded with $(VAR) against what came before.
// virtual-kubelet's own resolution runs before the pod has an IP (so status.podIP
// would be empty) and skips resourceFieldRef, hence this one.

type envResolver struct {
	client kubernetes.Interface
	pod    *corev1.Pod
	podIP  string
	hostIP string
	// Secrets and ConfigMaps read once per pod start.
	secrets    map[string]*corev1.Secret
	configMaps map[string]*corev1.ConfigMap
}

// containerEnv returns NAME=value pairs; an error names what is missing, as the
// kubelet's CreateContainerConfigError does.
func (r *envResolver) containerEnv(ctx context.Context, c *corev1.Container, base map[string]string) ([]string, error) {
	env := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := env[k]; !ok {
			order = append(order, k)
		}
		env[k] = v
	}
	for _, k := range sortedKeys(base) {
		set(k, base[k])
	}
	services, err := r.serviceEnv(ctx)
	if err != nil {
		return nil, err
	}
	for _, k := range sortedKeys(services) {
		set(k, services[k])
	}
	for _, from := range c.EnvFrom {
		data, err := r.envFromSource(ctx, from)
		if err != nil {
			return nil, err
		}
		for _, k := range sortedKeys(data) {
			set(from.Prefix+k, data[k])
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			set(e.Name, expand(e.Value, env))
			continue
		}
		v, ok, err := r.valueFrom(ctx, c, e.ValueFrom)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		if ok {
			set(e.Name, v)
		}
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+env[k])
	}
	return out, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// serviceEnv: KUBERNETES_SERVICE_HOST/PORT always, and with service links (the
// default) NAME_SERVICE_HOST/PORT for the ClusterIP Services of the pod's namespace.
func (r *envResolver) serviceEnv(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	add := func(svc *corev1.Service) {
		if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone || len(svc.Spec.Ports) == 0 {
			return
		}
		name := strings.ToUpper(strings.ReplaceAll(svc.Name, "-", "_"))
		port := svc.Spec.Ports[0]
		out[name+"_SERVICE_HOST"] = svc.Spec.ClusterIP
		out[name+"_SERVICE_PORT"] = strconv.Itoa(int(port.Port))
		if port.Name != "" {
			out[name+"_SERVICE_PORT_"+strings.ToUpper(strings.ReplaceAll(port.Name, "-", "_"))] = strconv.Itoa(int(port.Port))
		}
		proto := strings.ToLower(string(port.Protocol))
		if proto == "" {
			proto = "tcp"
		}
		url := fmt.Sprintf("%s://%s:%d", proto, svc.Spec.ClusterIP, port.Port)
		out[name+"_PORT"] = url
		prefix := fmt.Sprintf("%s_PORT_%d_%s", name, port.Port, strings.ToUpper(proto))
		out[prefix] = url
		out[prefix+"_PROTO"] = proto
		out[prefix+"_PORT"] = strconv.Itoa(int(port.Port))
		out[prefix+"_ADDR"] = svc.Spec.ClusterIP
	}
	if links := r.pod.Spec.EnableServiceLinks; links == nil || *links {
		list, err := r.client.CoreV1().Services(r.pod.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("listing services: %w", err)
		}
		for i := range list.Items {
			add(&list.Items[i])
		}
	}
	kube, err := r.client.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading the kubernetes service: %w", err)
	}
	add(kube)
	return out, nil
}

func (r *envResolver) secret(ctx context.Context, name string) (*corev1.Secret, error) {
	if s, ok := r.secrets[name]; ok {
		return s, nil
	}
	s, err := r.client.CoreV1().Secrets(r.pod.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	r.secrets[name] = s
	return s, nil
}

func (r *envResolver) configMap(ctx context.Context, name string) (*corev1.ConfigMap, error) {
	if cm, ok := r.configMaps[name]; ok {
		return cm, nil
	}
	cm, err := r.client.CoreV1().ConfigMaps(r.pod.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	r.configMaps[name] = cm
	return cm, nil
}

func optional(b *bool) bool { return b != nil && *b }

func (r *envResolver) envFromSource(ctx context.Context, from corev1.EnvFromSource) (map[string]string, error) {
	out := map[string]string{}
	switch {
	case from.ConfigMapRef != nil:
		cm, err := r.configMap(ctx, from.ConfigMapRef.Name)
		if err != nil {
			if apierrors.IsNotFound(err) && optional(from.ConfigMapRef.Optional) {
				return out, nil
			}
			return nil, fmt.Errorf("configmap %q not found", from.ConfigMapRef.Name)
		}
		for k, v := range cm.Data {
			out[k] = v
		}
	case from.SecretRef != nil:
		s, err := r.secret(ctx, from.SecretRef.Name)
		if err != nil {
			if apierrors.IsNotFound(err) && optional(from.SecretRef.Optional) {
				return out, nil
			}
			return nil, fmt.Errorf("secret %q not found", from.SecretRef.Name)
		}
		for k, v := range s.Data {
			out[k] = string(v)
		}
	}
	return out, nil
}

func (r *envResolver) valueFrom(ctx context.Context, c *corev1.Container, src *corev1.EnvVarSource) (string, bool, error) {
	switch {
	case src.FieldRef != nil:
		v, err := r.field(src.FieldRef.FieldPath)
		return v, true, err
	case src.ResourceFieldRef != nil:
		v, err := r.resourceField(c, src.ResourceFieldRef)
		return v, true, err
	case src.ConfigMapKeyRef != nil:
		ref := src.ConfigMapKeyRef
		cm, err := r.configMap(ctx, ref.Name)
		if err != nil {
			if apierrors.IsNotFound(err) && optional(ref.Optional) {
				return "", false, nil
			}
			return "", false, fmt.Errorf("configmap %q not found", ref.Name)
		}
		v, ok := cm.Data[ref.Key]
		if !ok && !optional(ref.Optional) {
			return "", false, fmt.Errorf("couldn't find key %s in ConfigMap %s/%s", ref.Key, r.pod.Namespace, ref.Name)
		}
		return v, ok, nil
	case src.SecretKeyRef != nil:
		ref := src.SecretKeyRef
		s, err := r.secret(ctx, ref.Name)
		if err != nil {
			if apierrors.IsNotFound(err) && optional(ref.Optional) {
				return "", false, nil
			}
			return "", false, fmt.Errorf("secret %q not found", ref.Name)
		}
		v, ok := s.Data[ref.Key]
		if !ok && !optional(ref.Optional) {
			return "", false, fmt.Errorf("couldn't find key %s in Secret %s/%s", ref.Key, r.pod.Namespace, ref.Name)
		}
		return string(v), ok, nil
	}
	return "", false, nil
}

func (r *envResolver) field(path string) (string, error) {
	meta := r.pod.ObjectMeta
	if key, ok := bracketKey(path, "metadata.labels"); ok {
		return meta.Labels[key], nil
	}
	if key, ok := bracketKey(path, "metadata.annotations"); ok {
		return meta.Annotations[key], nil
	}
	switch path {
	case "metadata.name":
		return meta.Name, nil
	case "metadata.namespace":
		return meta.Namespace, nil
	case "metadata.uid":
		return string(meta.UID), nil
	case "metadata.labels":
		return formatMap(meta.Labels), nil
	case "metadata.annotations":
		return formatMap(meta.Annotations), nil
	case "spec.nodeName":
		return r.pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return r.pod.Spec.ServiceAccountName, nil
	case "status.hostIP", "status.hostIPs":
		return r.hostIP, nil
	case "status.podIP", "status.podIPs":
		return r.podIP, nil
	}
	return "", fmt.Errorf("unsupported fieldPath %q", path)
}

func bracketKey(path, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(path, prefix+"['")
	if !ok {
		return "", false
	}
	key, ok := strings.CutSuffix(rest, "']")
	return key, ok
}

func formatMap(m map[string]string) string {
	lines := make([]string, 0, len(m))
	for _, k := range sortedKeys(m) {
		lines = append(lines, fmt.Sprintf("%s=%q", k, m[k]))
	}
	return strings.Join(lines, "\n")
}

// resourceField rounds up to the divisor, as the kubelet does; an unset limit is the
// node's allocatable there, which here is the request if any.
func (r *envResolver) resourceField(c *corev1.Container, ref *corev1.ResourceFieldSelector) (string, error) {
	target := c
	if ref.ContainerName != "" {
		target = nil
		for i := range r.pod.Spec.Containers {
			if r.pod.Spec.Containers[i].Name == ref.ContainerName {
				target = &r.pod.Spec.Containers[i]
			}
		}
		if target == nil {
			return "", fmt.Errorf("resourceFieldRef: no container %q", ref.ContainerName)
		}
	}
	kind, name, ok := strings.Cut(ref.Resource, ".")
	if !ok {
		return "", fmt.Errorf("unsupported resource %q", ref.Resource)
	}
	list := target.Resources.Limits
	if kind == "requests" {
		list = target.Resources.Requests
	}
	q, ok := list[corev1.ResourceName(name)]
	if !ok {
		q, ok = target.Resources.Requests[corev1.ResourceName(name)]
	}
	if !ok {
		return "0", nil
	}
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	if name == "cpu" {
		return strconv.FormatInt(int64(math.Ceil(float64(q.MilliValue())/float64(divisor.MilliValue()))), 10), nil
	}
	return strconv.FormatInt(int64(math.Ceil(float64(q.Value())/float64(divisor.Value()))), 10), nil
}

// expand replaces $(NAME) with NAME's value where defined and $$ with $, as
// Kubernetes does in env values, command and args.
func expand(s string, env map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteByte('$')
				continue
			}
			name := s[i+2 : i+2+end]
			if v, ok := env[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// envMap turns NAME=value pairs back into a map (for expanding command and args).
func envMap(pairs []string) map[string]string {
	m := make(map[string]string, len(pairs))
	for _, p := range pairs {
		k, v, _ := strings.Cut(p, "=")
		m[k] = v
	}
	return m
}
