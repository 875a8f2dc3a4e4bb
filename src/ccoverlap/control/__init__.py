"""The control plane: the lever registry, the policy file, the interposer's policy, the start-up hook, child
processes."""
