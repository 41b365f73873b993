"""libFuzzer targets built with clang outside Bazel's gcc toolchain, each run by an sh_test."""

# Per-file flags the Bazel targets give those files (the CPU kernels' ISA variants, OpenMP).
_FILE_FLAGS = ("case $$f in *avx512*) flags='-mavx512f -mfma';; *avx2*) flags='-mavx2 -mfma';; " +
               "kernels/cpu/*) flags=-fopenmp;; *) flags=;; esac; ")

def libfuzzer_test(name, main, srcs, libs = "", defines = [], max_len = 1500, timeout_s = 30):
    """`name` (a fuzzer binary from `main` and the .cc files among `srcs`; headers ride along)
    and `name`_test, which runs it from the corpus in corpus/`name` for `timeout_s` seconds."""
    native.genrule(
        name = name + "_bin",
        srcs = [main] + srcs,
        outs = [name],
        # Undefined behaviour stops the run like a crash (no recovering after the report).
        # Every .cc becomes an object with its own flags; only the .cc files are compiled.
        cmd = ("objs=; n=0; for f in $(SRCS); do case $$f in *.cc) ;; *) continue;; esac; " +
               _FILE_FLAGS +
               "n=$$((n+1)); o=$(@D)/" + name + "_obj_$$n.o; " +
               # Line tables only: reports name file and line; full debug info only costs time.
               "clang++-14 -std=c++17 -O1 -gline-tables-only " +
               "-fsanitize=fuzzer-no-link,address,undefined " +
               "-fno-sanitize-recover=all " + " ".join(["-D" + d for d in defines]) +
               " $$flags -I. -I$(GENDIR) -c $$f -o $$o || exit 1; objs=\"$$objs $$o\"; done; " +
               "clang++-14 -fsanitize=fuzzer,address,undefined -fopenmp -o $@ $$objs " + libs +
               "; status=$$?; rm -f $$objs; exit $$status"),
    )
    native.sh_test(
        name = name + "_test",
        size = "medium",
        srcs = ["run_fuzzer.sh"],
        args = ["$(location :%s)" % name, "corpus/" + name, str(max_len), str(timeout_s)],
        # Inputs that once crashed a reader, and real messages: replayed first, every run.
        data = [":" + name] + native.glob(["corpus/%s/*" % name]),
    )
