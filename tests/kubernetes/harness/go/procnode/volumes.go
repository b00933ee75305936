package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A pod's volumes as directories under its state folder; each container's init
// bind-mounts them at their mountPaths. Memory-backed emptyDirs (Ray's /dev/shm) are
// tmpfs mounts made in the pod sandbox's own mount namespace, sized to their
// sizeLimit, so they count as memory and vanish with the pod.

type volume struct {
	path     string
	readOnly bool
}

func (p *podRuntime) prepareVolumes(ctx context.Context, env *envResolver) (map[string]volume, error) {
	vols := map[string]volume{}
	for _, v := range p.pod.Spec.Volumes {
		dir := filepath.Join(p.dir, "volumes", v.Name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		src := v.VolumeSource
		switch {
		case src.EmptyDir != nil:
			if src.EmptyDir.Medium == corev1.StorageMediumMemory {
				opts := "mode=1777"
				if limit := src.EmptyDir.SizeLimit; limit != nil && !limit.IsZero() {
					opts += fmt.Sprintf(",size=%d", limit.Value())
				}
				if err := run(ctx, "", "nsenter", p.sandboxNS("mnt"), "mount", "-t", "tmpfs", "-o", opts, "tmpfs", dir); err != nil {
					return nil, fmt.Errorf("volume %s: %w", v.Name, err)
				}
			} else if err := os.Chmod(dir, 0o777); err != nil {
				return nil, err
			}
			vols[v.Name] = volume{path: dir}
		case src.HostPath != nil:
			vols[v.Name] = volume{path: src.HostPath.Path}
		case src.Secret != nil:
			s, err := env.secret(ctx, src.Secret.SecretName)
			if err != nil {
				if optional(src.Secret.Optional) {
					vols[v.Name] = volume{path: dir, readOnly: true}
					continue
				}
				return nil, fmt.Errorf("volume %s: secret %q not found", v.Name, src.Secret.SecretName)
			}
			if err := writeKeys(dir, bytesData(s.Data), src.Secret.Items, src.Secret.DefaultMode); err != nil {
				return nil, err
			}
			vols[v.Name] = volume{path: dir, readOnly: true}
		case src.ConfigMap != nil:
			cm, err := env.configMap(ctx, src.ConfigMap.Name)
			if err != nil {
				if optional(src.ConfigMap.Optional) {
					vols[v.Name] = volume{path: dir, readOnly: true}
					continue
				}
				return nil, fmt.Errorf("volume %s: configmap %q not found", v.Name, src.ConfigMap.Name)
			}
			if err := writeKeys(dir, stringData(cm.Data), src.ConfigMap.Items, src.ConfigMap.DefaultMode); err != nil {
				return nil, err
			}
			vols[v.Name] = volume{path: dir, readOnly: true}
		case src.DownwardAPI != nil:
			if err := p.writeDownward(dir, env, src.DownwardAPI.Items); err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
			vols[v.Name] = volume{path: dir, readOnly: true}
		case src.Projected != nil:
			if err := p.writeProjected(ctx, dir, env, src.Projected); err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
			vols[v.Name] = volume{path: dir, readOnly: true}
		default:
			return nil, fmt.Errorf("volume %s: only emptyDir, hostPath, secret, configMap, downwardAPI and projected volumes run on process nodes", v.Name)
		}
	}
	return vols, nil
}

func bytesData(m map[string][]byte) map[string][]byte { return m }

func stringData(m map[string]string) map[string][]byte {
	out := make(map[string][]byte, len(m))
	for k, v := range m {
		out[k] = []byte(v)
	}
	return out
}

func fileMode(mode *int32, fallback os.FileMode) os.FileMode {
	if mode != nil {
		return os.FileMode(*mode)
	}
	return fallback
}

func writeFile(dir, rel string, data []byte, mode os.FileMode) error {
	path := filepath.Join(dir, filepath.Clean("/"+rel))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, data, mode)
}

func writeKeys(dir string, data map[string][]byte, items []corev1.KeyToPath, defaultMode *int32) error {
	mode := fileMode(defaultMode, 0o644)
	if len(items) == 0 {
		for k, v := range data {
			if err := writeFile(dir, k, v, mode); err != nil {
				return err
			}
		}
		return nil
	}
	for _, item := range items {
		v, ok := data[item.Key]
		if !ok {
			return fmt.Errorf("key %q not found", item.Key)
		}
		if err := writeFile(dir, item.Path, v, fileMode(item.Mode, mode)); err != nil {
			return err
		}
	}
	return nil
}

func (p *podRuntime) writeDownward(dir string, env *envResolver, items []corev1.DownwardAPIVolumeFile) error {
	for _, item := range items {
		var value string
		var err error
		switch {
		case item.FieldRef != nil:
			value, err = env.field(item.FieldRef.FieldPath)
		case item.ResourceFieldRef != nil:
			value, err = env.resourceField(&p.pod.Spec.Containers[0], item.ResourceFieldRef)
		}
		if err != nil {
			return err
		}
		if err := writeFile(dir, item.Path, []byte(value), fileMode(item.Mode, 0o644)); err != nil {
			return err
		}
	}
	return nil
}

// writeProjected covers the service-account volume that admission adds to every
// pod (a bound token, the cluster CA from kube-root-ca.crt, the namespace) and any
// other projection of secrets, configMaps and the downward API.
func (p *podRuntime) writeProjected(ctx context.Context, dir string, env *envResolver, proj *corev1.ProjectedVolumeSource) error {
	for _, src := range proj.Sources {
		switch {
		case src.ServiceAccountToken != nil:
			token, err := p.token(ctx, src.ServiceAccountToken)
			if err != nil {
				return err
			}
			if err := writeFile(dir, src.ServiceAccountToken.Path, []byte(token), fileMode(proj.DefaultMode, 0o644)); err != nil {
				return err
			}
		case src.ConfigMap != nil:
			cm, err := env.configMap(ctx, src.ConfigMap.Name)
			if err != nil {
				if optional(src.ConfigMap.Optional) {
					continue
				}
				return fmt.Errorf("configmap %q not found", src.ConfigMap.Name)
			}
			if err := writeKeys(dir, stringData(cm.Data), src.ConfigMap.Items, proj.DefaultMode); err != nil {
				return err
			}
		case src.Secret != nil:
			s, err := env.secret(ctx, src.Secret.Name)
			if err != nil {
				if optional(src.Secret.Optional) {
					continue
				}
				return fmt.Errorf("secret %q not found", src.Secret.Name)
			}
			if err := writeKeys(dir, s.Data, src.Secret.Items, proj.DefaultMode); err != nil {
				return err
			}
		case src.DownwardAPI != nil:
			if err := p.writeDownward(dir, env, src.DownwardAPI.Items); err != nil {
				return err
			}
		}
	}
	return nil
}

// token is a TokenRequest bound to this pod, as the kubelet asks for. It is not
// refreshed: test pods live far shorter than its hour.
func (p *podRuntime) token(ctx context.Context, src *corev1.ServiceAccountTokenProjection) (string, error) {
	account := p.pod.Spec.ServiceAccountName
	if account == "" {
		account = "default"
	}
	request := &authv1.TokenRequest{
		Spec: authv1.TokenRequestSpec{
			ExpirationSeconds: src.ExpirationSeconds,
			BoundObjectRef: &authv1.BoundObjectReference{
				Kind: "Pod", APIVersion: "v1", Name: p.pod.Name, UID: p.pod.UID,
			},
		},
	}
	if src.Audience != "" {
		request.Spec.Audiences = []string{src.Audience}
	}
	resp, err := p.client.CoreV1().ServiceAccounts(p.pod.Namespace).CreateToken(ctx, account, request, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for service account %q: %w", account, err)
	}
	return resp.Status.Token, nil
}

// mountsFor lists what a container's init mounts: its volumeMounts resolved to
// host paths. subPath is honoured; the rest of mount propagation is not.
func (p *podRuntime) mountsFor(c *corev1.Container, vols map[string]volume) ([]mountSpec, error) {
	var out []mountSpec
	for _, m := range c.VolumeMounts {
		v, ok := vols[m.Name]
		if !ok {
			return nil, fmt.Errorf("volumeMount %s: no volume of that name", m.Name)
		}
		src := v.path
		if m.SubPath != "" {
			src = filepath.Join(src, filepath.Clean("/"+m.SubPath))
			if err := os.MkdirAll(src, 0o777); err != nil {
				return nil, err
			}
		}
		if !strings.HasPrefix(m.MountPath, "/") {
			return nil, fmt.Errorf("volumeMount %s: mountPath %q is not absolute", m.Name, m.MountPath)
		}
		out = append(out, mountSpec{Source: src, Target: m.MountPath, ReadOnly: m.ReadOnly || v.readOnly})
	}
	return out, nil
}
