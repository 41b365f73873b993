"""One cluster test: a shell script (NAME.sh) that starts real daemons with tools/local_cluster.sh
and drives them with dtrain-submit; it sources lib.sh and gets dtraind, dtrain-submit, the
cluster tool and the example spec as its first four arguments. The example specs reach the tests
with `sync: bsp` pinned (pinned_spec): a test asserts one mode's behaviour, where `auto`, the
default, would choose from the loopback link's figures of the moment."""

def pinned_spec(config):
    """:NAME-bsp.yaml, configs/NAME.yaml with training.sync: bsp under its gradient_sharing."""
    name = config.split(":")[1].replace(".yaml", "")
    native.genrule(
        name = name + "-bsp",
        srcs = [config],
        outs = [name + "-bsp.yaml"],
        cmd = "sed -e 's/^  mode: gradient_sharing$$/  mode: gradient_sharing\\n  sync: bsp/' $< > $@" +
              " && grep -q '^  sync: bsp$$' $@",
    )

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
            "$(location :fashion-mnist-mlp-bsp.yaml)",
        ] + extra_args,
        data = [
            "lib.sh",
            ":fashion-mnist-mlp-bsp.yaml",
            "//daemon:dtraind",
            "//submit:dtrain-submit",
            "//tools:local_cluster.sh",
        ] + extra_data,
        # Daemons on loopback ports and their training processes: no sandbox, and the two
        # cores to itself.
        tags = ["exclusive", "local"] + (["manual"] if manual else []),
    )
