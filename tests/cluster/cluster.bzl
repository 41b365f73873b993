"""One cluster test: a shell script (NAME.sh) that starts real daemons with tools/local_cluster.sh
and drives them with dtrain-submit; it sources lib.sh and gets dtraind, dtrain-submit, the
cluster tool and the example spec as its first four arguments."""

def cluster_test(name, extra_args = [], extra_data = [], manual = False, script = None):
    """script: the test's shell script when it is not NAME.sh (one script, several targets)."""
    native.sh_test(
        name = name,
        size = "large",
        timeout = "long",
        srcs = [script or name + ".sh"],
        args = [
            "$(location //daemon:dtraind)",
            "$(location //submit:dtrain-submit)",
            "$(location //tools:local_cluster.sh)",
            "$(location //configs:fashion-mnist-mlp.yaml)",
        ] + extra_args,
        data = [
            "lib.sh",
            "//configs:fashion-mnist-mlp.yaml",
            "//daemon:dtraind",
            "//submit:dtrain-submit",
            "//tools:local_cluster.sh",
        ] + extra_data,
        # Daemons on loopback ports and their training processes: no sandbox, and the two
        # cores to itself.
        tags = ["exclusive", "local"] + (["manual"] if manual else []),
    )
