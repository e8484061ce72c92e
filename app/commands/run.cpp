// `cuflash run`: compute forward (and with --backward, dQ/dK/dV) for one case, on the GPU or the
// CPU reference; print a summary of each output tensor and optionally write them as .npy files.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>

#include <spdlog/spdlog.h>

#include "cli/attention_case.h"
#include "cli/byte_size.h"
#include "cli/backends.h"
#include "cli/compute_progress.h"
#include "cli/exit_codes.h"
#include "cli/interrupt.h"
#include "cli/memory_check.h"
#include "cli/output_folder.h"
#include "cli/tensor_summary.h"
#include "commands/commands.h"
#include "cuflash/io/convert.h"

namespace cuflash::cli {

namespace {

struct RunOptions {
  ProblemOptions problem;
  std::string backend = "auto";
  bool backward = false;
  std::string out_dir;
  bool save_inputs = false;
};

// One tensor to report and maybe save, in its stored form (as on the device and in the file).
struct NamedTensor {
  std::string name;
  const io::NpyArray* array;
  bool is_lse;
};

std::vector<NamedTensor> outputs_of(const AttentionResult& r) {
  std::vector<NamedTensor> ts{{"o", &r.out, false}, {"lse", &r.lse, true}};
  if (!r.dq.bytes.empty()) {
    ts.push_back({"dq", &r.dq, false});
    ts.push_back({"dk", &r.dk, false});
    ts.push_back({"dv", &r.dv, false});
  }
  return ts;
}

std::vector<NamedTensor> inputs_of(const CaseInputs& in) {
  std::vector<NamedTensor> ts{{"q", &in.q, false}, {"k", &in.k, false}, {"v", &in.v, false}};
  if (!in.dout.bytes.empty()) ts.push_back({"dout", &in.dout, false});
  return ts;
}

// `out`: the run's O, which tells LSE's rows without keys from overflows (summarize_lse()).
Record tensor_record(const Problem& p, Backend backend, const NamedTensor& t,
                     const io::NpyArray& out, const std::string& out_dir) {
  const TensorSummary s =
      t.is_lse ? summarize_lse(*t.array, out, p.shape.head_dim) : summarize_tensor(*t.array);
  Record r;
  r.add("tensor", t.name)
      .add("shape", t.array->shape)
      .add("dtype", t.is_lse ? std::string("fp32") : std::string(to_string(p.dtype)))
      .add("backend", to_string(backend))
      .add("mean", s.mean)
      .add("rms", s.rms)
      .add("abs_max", s.abs_max)
      .add("nonfinite", s.nonfinite);
  if (!out_dir.empty()) {
    r.add("file", (std::filesystem::path(out_dir) / (t.name + ".npy")).string());
  }
  return r;
}

namespace fs = std::filesystem;

// What `run --out-dir` does with each file name it knows (the rules of the README's "Output
// folders"):
//   - o, lse (and dq, dk, dv with --backward), and with --save-inputs q, k, v (and dout): written,
//     replacing an earlier file of that name, all or nothing (OutputFolder);
//   - a name whose file is one of this run's input files (--q/--k/--v/--dout/--alibi-slopes, the
//     same file through any path or link) is never written: with --save-inputs its own input (q.npy
//     given as --q) is left as it is, since it already holds those values; any other use is
//     refused;
//   - q, k, v (and dout with --backward) in the folder that are not this run's inputs and would
//     not be replaced (no --save-inputs): refused, since they would sit beside outputs they did
//     not produce;
//   - dq, dk, dv and dout in the folder on a forward-only run: kept, with a warning.
struct FolderPlan {
  std::vector<std::string> write;        // names without ".npy", in writing order
  std::vector<std::string> kept_inputs;  // --save-inputs names that are this run's own inputs
  std::vector<std::string> stale;        // files of a backward run, warned about on success
};

// This run's input files by role, the option's name ("q", "k", "v", "dout", "alibi-slopes").
std::vector<std::pair<std::string, std::string>> input_files(const RunOptions& o) {
  std::vector<std::pair<std::string, std::string>> files;
  const ProblemOptions& p = o.problem;
  for (const auto& [role, path] : {std::pair<const char*, const std::string&>{"q", p.q_file},
                                   {"k", p.k_file},
                                   {"v", p.v_file},
                                   {"dout", p.dout_file},
                                   {"alibi-slopes", p.alibi_slopes_file}}) {
    if (!path.empty()) files.emplace_back(role, path);
  }
  return files;
}

bool entry_exists(const fs::path& path) {
  std::error_code ec;
  return fs::exists(fs::symlink_status(path, ec));
}

// The role ("q", ...) of the input file that `path` is (the same file: device and inode), or "".
std::string input_role(const fs::path& path,
                       const std::vector<std::pair<std::string, std::string>>& inputs) {
  for (const auto& [role, file] : inputs) {
    std::error_code ec;
    if (fs::equivalent(path, file, ec)) return role;
  }
  return {};
}

// The file given as --`role`, and the name it is reached by in the output folder where that
// differs (a link, another spelling): "inq.npy (as out/o.npy)".
std::string given_as(const std::string& role, const fs::path& in_folder,
                     const std::vector<std::pair<std::string, std::string>>& inputs) {
  for (const auto& [given_role, file] : inputs) {
    if (given_role != role) continue;
    return file == in_folder.string() ? file : file + " (as " + in_folder.string() + ")";
  }
  return in_folder.string();
}

std::string npy(const std::string& name) { return name + ".npy"; }

std::string joined(const std::vector<std::string>& names) {
  std::string text;
  for (size_t i = 0; i < names.size(); ++i) {
    text += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + npy(names[i]);
  }
  return text;
}

FolderPlan plan_folder(const RunOptions& o) {
  const fs::path dir(o.out_dir);
  const auto inputs = input_files(o);
  FolderPlan plan;
  std::vector<std::string> outputs{"o", "lse"}, saved{"q", "k", "v"};
  if (o.backward) {
    outputs.insert(outputs.end(), {"dq", "dk", "dv"});
    saved.push_back("dout");
  }
  for (const std::string& name : outputs) {
    const std::string role = input_role(dir / npy(name), inputs);
    if (!role.empty()) {
      throw UsageError("--out-dir " + o.out_dir + ": writing " + npy(name) + " would replace --" +
                       role + " " + given_as(role, dir / npy(name), inputs) +
                       ", an input of this run; choose another --out-dir");
    }
    plan.write.push_back(name);
  }
  std::vector<std::string> foreign;  // inputs of some other run, not replaced by this one
  for (const std::string& name : saved) {
    const std::string role = input_role(dir / npy(name), inputs);
    if (o.save_inputs) {
      if (role == name) {
        plan.kept_inputs.push_back(name);
      } else if (!role.empty()) {
        throw UsageError("--save-inputs would replace " + (dir / npy(name)).string() +
                         ", this run's --" + role + " " + given_as(role, dir / npy(name), inputs) +
                         "; choose another --out-dir");
      } else {
        plan.write.push_back(name);
      }
    } else if (role.empty() && entry_exists(dir / npy(name))) {
      foreign.push_back(name);
    }
  }
  if (!foreign.empty()) {
    throw UsageError("--out-dir " + o.out_dir + " holds " + joined(foreign) +
                     (foreign.size() == 1 ? ", which is not an input" : ", which are not inputs") +
                     " of this run and would sit beside its outputs; add --save-inputs to "
                     "replace them, give them as --q/--k/--v" +
                     (o.backward ? std::string("/--dout") : std::string()) +
                     ", remove them, or choose another --out-dir");
  }
  if (!o.backward) {
    for (const std::string name : {"dq", "dk", "dv", "dout"}) {
      if (input_role(dir / npy(name), inputs).empty() && entry_exists(dir / npy(name))) {
        plan.stale.push_back(name);
      }
    }
  }
  return plan;
}

// Bytes of the files, a little above their exact size (headers of up to 4 KiB).
uint64_t planned_bytes(const Problem& p, const std::vector<std::string>& names) {
  const AttentionShape& s = p.shape;
  const uint64_t element = io::element_size(io::element_type(p.dtype));
  uint64_t total = 0;
  for (const std::string& name : names) {
    const bool kv = name == "k" || name == "v" || name == "dk" || name == "dv";
    const uint64_t rows = uint64_t(s.batch) * uint64_t(kv ? s.heads_kv : s.heads) *
                          uint64_t(kv ? s.seq_k : s.seq_q);
    total += 4096 + (name == "lse" ? 4 * rows : element * rows * uint64_t(s.head_dim));
  }
  return total;
}

// Throws when stdout could not take the results (a full disk): then the output files are not
// moved in either.
void require_stdout_written() {
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int error = errno;
  if (flushed && !std::ferror(stdout)) return;
  throw RuntimeFailure("cannot write the results to stdout" +
                       (!flushed && error != 0 ? ": " + std::string(std::strerror(error))
                                               : std::string()) +
                       "; --out-dir is left as it was");
}

// The steps of `run`, cheapest checks first: what needs no GPU (options, shape, the headers of
// input files), the output folder, the device, the memory, and only then the inputs, the
// computation and the files.
int run_steps(const RunOptions& o, const GlobalOptions& global) {
  // 1. The options and the shape, files' headers included: exit 2 before anything else.
  if (o.save_inputs && o.out_dir.empty()) throw UsageError("--save-inputs needs --out-dir");
  if (!o.problem.dout_file.empty() && !o.backward) throw UsageError("--dout needs --backward");
  Problem p;
  if (o.problem.has_input_files()) {
    p = describe_inputs(o.problem, o.backward);
  } else {
    if (!o.problem.dout_file.empty()) throw UsageError("--dout needs --q, --k and --v");
    require_single_values(o.problem, "run");
    p = expand_cases(o.problem).front();
  }
  if (o.backward) require_forward_only(p, "--backward");
  if (o.backend == "cuda") require_gpu_support(p);
  if (p.deterministic && !o.backward) {
    spdlog::warn("--deterministic orders the backward pass only; without --backward it changes "
                 "nothing");
  }

  // 2. The output folder: its rules, then created and proven writable, with room for the files.
  FolderPlan plan;
  std::optional<OutputFolder> folder;
  if (!o.out_dir.empty()) {
    plan = plan_folder(o);
    std::vector<std::string> files;
    for (const std::string& name : plan.write) files.push_back(npy(name));
    folder.emplace(o.out_dir, files, planned_bytes(p, plan.write));
  }

  // 3. The device, 4. the memory the case needs.
  const Backend backend = resolve_backend(o.backend);
  if (backend == Backend::cuda) require_gpu_support(p);
  if (o.backend == "auto" && backend == Backend::cpu) {
    spdlog::warn("no CUDA device found: computing on the CPU reference (float64) instead");
  }
  check_run_memory(p, o.backward, backend);

  // 5. The inputs, 6. the computation; Ctrl-C stops either.
  const auto stop_if_interrupted = [] { throw_if_interrupted("while preparing the inputs"); };
  const CaseInputs inputs =
      o.problem.has_input_files()
          ? load_inputs(o.problem, p, o.backward, stop_if_interrupted)
          : generate_inputs(p, o.problem.seed, o.backward, stop_if_interrupted);
  spdlog::info("{} {} on {}", o.backward ? "forward+backward" : "forward", case_label(p),
               to_string(backend));
  AttentionResult result;
  {
    ComputeProgress progress(!global.quiet);
    result = compute(backend, p, inputs, o.backward, progress.callback());
  }
  throw_if_interrupted("while computing");
  spdlog::info("computed in {:.3f} s", result.seconds);
  for (const std::string& line : describe_launches(result.launches)) spdlog::info("{}", line);

  // 7. The files into the staging folder, 8. the summary on stdout, 9. the files moved in: exit
  // 0 means both the files and the summary arrived; any failure leaves the folder as it was.
  // Each tensor is written as it is held: no copy on the way to the file.
  std::vector<NamedTensor> tensors = outputs_of(result);
  if (folder) {
    std::vector<NamedTensor> all = tensors;
    for (const NamedTensor& t : inputs_of(inputs)) all.push_back(t);
    for (const std::string& name : plan.write) {
      for (const NamedTensor& t : all) {
        if (t.name == name) folder->write(npy(name), *t.array);
      }
    }
  }
  std::vector<Record> records;
  for (const NamedTensor& t : tensors) {
    records.push_back(tensor_record(p, backend, t, result.out, o.out_dir));
  }
  print_records(records, global.output_format());
  const double peak = peak_host_bytes(), estimate = run_memory_need(p, o.backward, backend).host_bytes;
  spdlog::debug("peak host memory {} ({:.0f} bytes), estimated {} ({:.0f} bytes)",
                format_bytes(peak), peak, format_bytes(estimate), estimate);
  if (folder) {
    require_stdout_written();
    folder->commit();
    spdlog::info("wrote {} files to {}", plan.write.size(), o.out_dir);
    if (!plan.kept_inputs.empty()) {
      spdlog::info("not rewritten, being this run's input files: {}", joined(plan.kept_inputs));
    }
    for (const std::string& name : plan.stale) {
      spdlog::warn("{} is from an earlier run (this one has no backward pass); delete it or use "
                   "another --out-dir",
                   (fs::path(o.out_dir) / npy(name)).string());
    }
  }
  return kExitOk;
}

int run_command(const RunOptions& o, const GlobalOptions& global) {
  const InterruptScope interrupts;  // Ctrl-C, SIGTERM and SIGHUP only set a flag the steps poll
  try {
    return run_steps(o, global);
  } catch (const Interrupted& e) {  // the output folder has been restored by now
    if (o.out_dir.empty()) throw;
    throw Interrupted(std::string(e.what()) + "; --out-dir " + o.out_dir + " is left as it was");
  }
}

}  // namespace

void setup_run(CLI::App& app, const GlobalOptions& global, CommandResult& result) {
  auto options = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand(
      "run", "Compute attention for one case (generated or from .npy files) and summarise it");
  cmd->footer(std::string("Example: cuflash run -b 2 --heads 4 -s 257 -d 64 --dtype bf16 --causal "
                          "--backward --out-dir out\n") + kRunExitCodeHelp);
  add_problem_options(*cmd, options->problem, /*allow_lists=*/false,
                      /*reads_input_files=*/true);
  cmd->add_option("--backend", options->backend,
                  "auto (GPU when present, else CPU), cuda, or cpu (float64 reference)")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}))
      ->capture_default_str();
  cmd->add_flag("--backward", options->backward, "Also compute dQ, dK, dV");
  cmd->add_option("--out-dir", options->out_dir,
                  "Write o.npy, lse.npy (and dq/dk/dv.npy) into this folder")
      ->check(non_empty_value("DIR"));
  cmd->add_flag("--save-inputs", options->save_inputs,
                "With --out-dir: also write q.npy, k.npy, v.npy (and dout.npy)");
  cmd->callback([options, &global, &result] { result.exit_code = run_command(*options, global); });
}

}  // namespace cuflash::cli
