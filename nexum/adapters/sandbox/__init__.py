"""A real sandbox for the gate's checks (SPEC V1, V4, V8). Framework-free: no Django, no Celery.

``commands.run_command`` runs a ``CommandCheck``; ``runner.CheckRunner`` runs any check kind and is the
``run_check`` the gate takes. A policy (``policy.SandboxPolicy``) is per project: ``workspace_root`` is that
project's own folder. What the sandbox guarantees, in the order it checks:

1. Working directory: ``cwd`` (relative to the project's folder, or absolute) is resolved with
   ``os.path.realpath`` so ``..`` and symlinks are followed, and must be an existing directory inside the
   project's folder, else ``workspace_violation``. Nothing runs.
2. Executable: resolved before anything runs, a bare name on the scrubbed PATH, a name with a slash relative
   to the resolved cwd, and allowed only by the allowlist (``executables.py`` says how an entry matches).
   Not allowed → ``denied_executable``, whether or not it exists (existence is not revealed). Allowed but
   absent → ``missing_executable``. The child runs exactly the path that was vetted (argv[0] is replaced by
   it), never a second PATH lookup. The allowlist vets the first program only: inside the sandbox a check
   may run anything the sandbox shows.
3. Environment: only the variables named in ``env_allowlist`` are copied from the worker, then ``env_set``
   is applied; inside bubblewrap HOME and TMPDIR are the private /tmp. PYTHONPATH is not in the default
   allowlist: a parent's import path must not leak in.
4. Isolation (``isolation="bwrap"``, the default; see ``bubblewrap.py`` for every namespace and mount): the
   check runs in its own user, PID, network (loopback only), IPC, UTS and cgroup namespaces without
   capabilities, as uid 1000 inside, and sees only the system folders, the allowlisted executables' install
   prefixes, the operator's ``read_only_paths`` and its project's folder (read-write, at /workspace).
   The ``hidden_paths`` (data directory, artifact store, database file, workspace root, /run) do not exist
   inside. When bubblewrap is missing or cannot work here, or a mount would show a hidden path, the check is
   refused with ``sandbox_unavailable`` and a message saying how to fix it; nothing runs. ``isolation="none"``
   (development only, chosen explicitly) runs the program directly in a new session.
5. Limits, set before bubblewrap executes (so on it and everything inside): RLIMIT_CPU (soft, hard one
   second later), RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_CORE 0 (no core file in the workspace) and, for a worker
   that is not root, RLIMIT_NPROC, never above the worker's hard limits; RLIMIT_NPROC then counts the check's
   processes together with the worker user's other processes. A root worker's checks all run as one host
   user (item 6), for whom RLIMIT_NPROC would count every check at once: each check gets its own pids cgroup
   (``pids_cgroup.py``) holding ``max_processes``, joined before the user is dropped; a root worker without
   a writable pids cgroup refuses checks (``sandbox_unavailable``) unless ``max_processes`` is None. The
   private /tmp holds at most ``tmp_bytes``.
6. No host privilege: bubblewrap maps the check's uid 1000 to the user that runs it, so a root worker's
   sandbox process drops to ``host_uid``/``host_gid`` (no supplementary groups) after joining the cgroup and
   setting the limits, and executes bubblewrap as that user: whatever a check makes belongs to it, never to
   host root. A mount behind a folder that user cannot search is bound back in place first, in a mount
   namespace of the sandbox process's own; a mount it cannot read, or a workspace it cannot write, is
   ``sandbox_unavailable`` naming the path; a root worker without ``host_uid`` refuses command checks. The
   workspace is mounted nosuid,nodev, and after every command check ``sweep_workspace`` clears setuid and
   setgid bits and removes device nodes in the project's folder.
7. Output is read incrementally (no deadlock on a chatty child; reading continues past the cap and drops the
   excess). Above the cap the head and the tail are kept (a test runner's summary is at the end) with a
   marker line in between, and ``truncated`` is set.
8. End: the check is over when its first program exits or the wall-clock timeout passes (reason
   ``timeout``). Either way every process it started is killed: inside bubblewrap the sandbox's PID 1 is
   killed and the kernel kills the whole PID namespace, ``setsid`` double forks included; ``run_command``
   returns only once the namespace's PID 1 is gone (which the kernel allows only once every process in it
   is). If the worker itself dies, bubblewrap (``--die-with-parent``) and then the namespace die with it.
   ``on_start(pid)`` is told the pid of the outermost sandbox process: SIGKILL to it ends the whole check.
   Without bubblewrap the process group is killed and waited for (a ``setsid`` escapes it).
9. Status: 0 → ``passed``; >0 → ``exit_nonzero``; killed by a signal → ``crashed`` (``exit_code`` is minus
   the signal), except SIGXCPU (the CPU limit) → ``timeout``. Bubblewrap reports a program killed by signal
   N as exit status 128 + N, as shells do; such a status reads back as the signal.

File and artifact checks run in the worker: a file is opened once, beneath the project's folder
(``workspace.py``), at most ``max_read_bytes`` are read, and patterns are RE2 (linear time: no pattern can
hold a worker).

The modules, in the order a command check meets them: ``policy`` (the operator's limits), ``workspace``
(paths and files beneath the project's folder), ``executables`` (the allowlist), ``probe`` (whether the
sandbox can be built here), ``staging`` (a root worker's host user and what it can reach), ``launch``
(starting the program), ``bubblewrap`` (its mounts and command line), ``pids_cgroup`` (a root worker's
process limit), ``running`` (ending a started check), ``groups`` (process groups and leftovers), ``output``,
``sweep``, ``commands`` (``run_command``) and ``runner`` (``CheckRunner``).
"""
