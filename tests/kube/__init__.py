"""The real Kubernetes control plane (kube-apiserver, kube-controller-manager, etcd) from make kube-bin."""
