# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_wf_global_optspecs
    string join \n database-url= json output= q/quiet h/help V/version
end

function __fish_wf_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_wf_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_wf_using_subcommand
    set -l cmd (__fish_wf_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c wf -n "__fish_wf_needs_command" -l database-url -d 'PostgreSQL connection (URL or key=value; TLS as libpq: sslmode, sslrootcert, sslcert, sslkey; connect_timeout bounds the whole connect, 10 s by default); unset: the embedded local cluster under WF_HOME' -r
complete -c wf -n "__fish_wf_needs_command" -l output -d 'Output format (`--json` is the short form of `--output json`) [default: table]' -r -f -a "table\t''
json\t''"
complete -c wf -n "__fish_wf_needs_command" -l json -d 'Print exactly one JSON document on stdout'
complete -c wf -n "__fish_wf_needs_command" -s q -l quiet -d 'Hide progress and informational messages'
complete -c wf -n "__fish_wf_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c wf -n "__fish_wf_needs_command" -s V -l version -d 'Print version'
complete -c wf -n "__fish_wf_needs_command" -f -a "db" -d 'Manage the database: the embedded cluster and migrations'
complete -c wf -n "__fish_wf_needs_command" -f -a "source" -d 'Manage git sources of actions'
complete -c wf -n "__fish_wf_needs_command" -f -a "sync" -d 'Fetch a source, materialize a commit into the store (marker last), then update the catalog'
complete -c wf -n "__fish_wf_needs_command" -f -a "actions" -d 'List the catalog of actions'
complete -c wf -n "__fish_wf_needs_command" -f -a "enqueue" -d 'Enqueue a job (or a batch of jobs) through the single enqueue path'
complete -c wf -n "__fish_wf_needs_command" -f -a "work" -d 'Run a worker: claim jobs, run them with bun, heartbeat, complete'
complete -c wf -n "__fish_wf_needs_command" -f -a "cancel" -d 'Cancel jobs: waiting ones at once, running ones by a mark their worker acts on'
complete -c wf -n "__fish_wf_needs_command" -f -a "rerun" -d 'Enqueue a job again, with the same input, through the single enqueue path'
complete -c wf -n "__fish_wf_needs_command" -f -a "reap" -d 'Run one reaper pass: recover jobs whose worker stopped sending heartbeats'
complete -c wf -n "__fish_wf_needs_command" -f -a "jobs" -d 'List jobs, newest first'
complete -c wf -n "__fish_wf_needs_command" -f -a "show" -d 'Show everything about one job'
complete -c wf -n "__fish_wf_needs_command" -f -a "result" -d 'Print a job\'s result (exit 4 when it failed or was canceled, 3 when not finished)'
complete -c wf -n "__fish_wf_needs_command" -f -a "logs" -d 'Print a job\'s logs'
complete -c wf -n "__fish_wf_needs_command" -f -a "status" -d 'Queue depth per tag: queued, scheduled, running, zombies, oldest wait (since the oldest waiting job was due: one enqueued with a past --at counts from that time)'
complete -c wf -n "__fish_wf_needs_command" -f -a "workers" -d 'Workers, live and recently gone: their tags, slots, current jobs and last beat'
complete -c wf -n "__fish_wf_needs_command" -f -a "token" -d 'Verify WF_TOKEN tokens'
complete -c wf -n "__fish_wf_needs_command" -f -a "schedule" -d 'Cron schedules that enqueue jobs through the single enqueue path'
complete -c wf -n "__fish_wf_needs_command" -f -a "prune" -d 'Delete completed jobs (records, logs) older than a cutoff, in batches'
complete -c wf -n "__fish_wf_needs_command" -f -a "bench" -d 'Measure the spine on the configured database (in a tag of its own, cleaned up after)'
complete -c wf -n "__fish_wf_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c wf -n "__fish_wf_using_subcommand db; and not __fish_seen_subcommand_from up down status migrate help" -l database-url -d 'PostgreSQL connection (URL or key=value; TLS as libpq: sslmode, sslrootcert, sslcert, sslkey; connect_timeout bounds the whole connect, 10 s by default); unset: the embedded local cluster under WF_HOME' -r
complete -c wf -n "__fish_wf_using_subcommand db; and not __fish_seen_subcommand_from up down status migrate help" -l output -d 'Output format (`--json` is the short form of `--output json`) [default: table]' -r -f -a "table\t''
json\t''"
complete -c wf -n "__fish_wf_using_subcommand db; and not __fish_seen_subcommand_from up down status migrate help" -l json -d 'Print exactly one JSON document on stdout'
complete -c wf -n "__fish_wf_using_subcommand db; and not __fish_seen_subcommand_from up down status migrate help" -s q -l quiet -d 'Hide progress and informational messages'
complete -c wf -n "__fish_wf_using_subcommand db; and not __fish_seen_subcommand_from up down status migrate help" -s h -l help -d 'Print help'
complete -c wf -n "__fish_wf_using_subcommand db; and not __fish_seen_subcommand_from up down status migrate help" -f -a "up" -d 'Create (if needed) and start the embedded cluster, then migrate it'
complete -c wf -n "__fish_wf_using_subcommand db; and not __fish_seen_subcommand_from up down status migrate help" -f -a "down" -d 'Stop the embedded cluster (fast shutdown), and keep it stopped until `wf db up`'
complete -c wf -n "__fish_wf_using_subcommand db; and not __fish_seen_subcommand_from up down status migrate help" -f -a "status" -d 'Show the database\'s state, the schema version, and whether the connection is encrypted'
complete -c wf -n "__fish_wf_using_subcommand db; and not __fish_seen_subcommand_from up down status migrate help" -f -a "migrate" -d 'Apply pending migrations to the configured database'
complete -c wf -n "__fish_wf_using_subcommand db; and not __fish_seen_subcommand_from up down status migrate help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c wf -n "__fish_wf_using_subcommand db; and __fish_seen_subcommand_from up" -l database-url -d 'PostgreSQL connection (URL or key=value; TLS as libpq: sslmode, sslrootcert, sslcert, sslkey; connect_timeout bounds the whole connect, 10 s by default); unset: the embedded local cluster under WF_HOME' -r
complete -c wf -n "__fish_wf_using_subcommand db; and __fish_seen_subcommand_from up" -l output -d 'Output format (`--json` is the short form of `--output json`) [default: table]' -r -f -a "table\t''
json\t''"
complete -c wf -n "__fish_wf_using_subcommand db; and __fish_seen_subcommand_from up" -l json -d 'Print exactly one JSON document on stdout'
complete -c wf -n "__fish_wf_using_subcommand db; and __fish_seen_subcommand_from up" -s q -l quiet -d 'Hide progress and informational messages'
complete -c wf -n "__fish_wf_using_subcommand db; and __fish_seen_subcommand_from up" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c wf -n "__fish_wf_using_subcommand db; and __fish_seen_subcommand_from down" -l database-url -d 'PostgreSQL connection (URL or key=value; TLS as libpq: sslmode, sslrootcert, sslcert, sslkey; connect_timeout bounds the whole connect, 10 s by default); unset: the embedded local cluster under WF_HOME' -r
complete -c wf -n "__fish_wf_using_subcommand db; and __fish_seen_subcommand_from down" -l output -d 'Output format (`--json` is the short form of `--output json`) [default: table]' -r -f -a "table\t''
json\t''"
complete -c wf -n "__fish_wf_using_subcommand db; and __fish_seen_subcommand_from down" -l json -d 'Print exactly one JSON document on stdout'
complete -c wf -n "__fish_wf_using_subcommand db; and __fish_seen_subcommand_from down" -s q -l quiet -d 'Hide progress and informational messages'
complete -c wf -n "__fish_wf_using_subcommand db; and __fish_seen_subcommand_from down" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c wf -n "__fish_wf_using_subcommand db; and __fish_seen_subcommand_from status" -l database-url -d 'PostgreSQL connection (URL or key=value; TLS as libpq: sslmode, sslrootcert, sslcert, sslkey; connect_timeout bounds the whole connect, 10 s by default); unset: the embedded local cluster under WF_HOME' -r
complete -c wf -n "__fish_wf_using_subcommand db; and __fish_seen_subcommand_from status" -l output -d 'Output format (`--json` is the short form of `--output json`) [default: table]' -r -f -a "table\t''
json\t''"
complete -c wf -n "__fish_wf_using_subcommand db; and __fish_seen_subcommand_from status" -l json -d 'Print exactly one JSON document on stdout'
complete -c wf -n "__fish_wf_using_subcommand db; and __fish_seen_subcommand_from status" -s q -l quiet -d 'Hide progress and informational messages'
complete -c wf -n "__fish_wf_using_subcommand db; and __fish_seen_subcommand_from status" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c wf -n "__fish_wf_using_subcommand db; and __fish_seen_subcommand_from migrate" -l database-url -d 'PostgreSQL connection (URL or key=value; TLS as libpq: sslmode, sslrootcert, sslcert, sslkey; connect_timeout bounds the whole connect, 10 s by default); unset: the embedded local cluster under WF_HOME' -r
complete -c wf -n "__fish_wf_using_subcommand db; and __fish_seen_subcommand_from migrate" -l output -d 'Output format (`--json` is the short form of `--output json`) [default: table]' -r -f -a "table\t''
json\t''"
complete -c wf -n "__fish_wf_using_subcommand db; and __fish_seen_subcommand_from migrate" -l json -d 'Print exactly one JSON document on stdout'
complete -c wf -n "__fish_wf_using_subcommand db; and __fish_seen_subcommand_from migrate" -s q -l quiet -d 'Hide progress and informational messages'
complete -c wf -n "__fish_wf_using_subcommand db; and __fish_seen_subcommand_from migrate" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c wf -n "__fish_wf_using_subcommand db; and __fish_seen_subcommand_from help" -f -a "up" -d 'Create (if needed) and start the embedded cluster, then migrate it'
complete -c wf -n "__fish_wf_using_subcommand db; and __fish_seen_subcommand_from help" -f -a "down" -d 'Stop the embedded cluster (fast shutdown), and keep it stopped until `wf db up`'
complete -c wf -n "__fish_wf_using_subcommand db; and __fish_seen_subcommand_from help" -f -a "status" -d 'Show the database\'s state, the schema version, and whether the connection is encrypted'
complete -c wf -n "__fish_wf_using_subcommand db; and __fish_seen_subcommand_from help" -f -a "migrate" -d 'Apply pending migrations to the configured database'
complete -c wf -n "__fish_wf_using_subcommand db; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c wf -n "__fish_wf_using_subcommand source; and not __fish_seen_subcommand_from add list rm help" -l database-url -d 'PostgreSQL connection (URL or key=value; TLS as libpq: sslmode, sslrootcert, sslcert, sslkey; connect_timeout bounds the whole connect, 10 s by default); unset: the embedded local cluster under WF_HOME' -r
complete -c wf -n "__fish_wf_using_subcommand source; and not __fish_seen_subcommand_from add list rm help" -l output -d 'Output format (`--json` is the short form of `--output json`) [default: table]' -r -f -a "table\t''
json\t''"
complete -c wf -n "__fish_wf_using_subcommand source; and not __fish_seen_subcommand_from add list rm help" -l json -d 'Print exactly one JSON document on stdout'
complete -c wf -n "__fish_wf_using_subcommand source; and not __fish_seen_subcommand_from add list rm help" -s q -l quiet -d 'Hide progress and informational messages'
complete -c wf -n "__fish_wf_using_subcommand source; and not __fish_seen_subcommand_from add list rm help" -s h -l help -d 'Print help'
complete -c wf -n "__fish_wf_using_subcommand source; and not __fish_seen_subcommand_from add list rm help" -f -a "add" -d 'Register a git source'
complete -c wf -n "__fish_wf_using_subcommand source; and not __fish_seen_subcommand_from add list rm help" -f -a "list" -d 'List git sources'
complete -c wf -n "__fish_wf_using_subcommand source; and not __fish_seen_subcommand_from add list rm help" -f -a "rm" -d 'Remove a git source and its actions from the catalog (jobs keep their pinned metadata)'
complete -c wf -n "__fish_wf_using_subcommand source; and not __fish_seen_subcommand_from add list rm help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c wf -n "__fish_wf_using_subcommand source; and __fish_seen_subcommand_from add" -l branch -d 'Branch to follow (default: the remote\'s HEAD)' -r
complete -c wf -n "__fish_wf_using_subcommand source; and __fish_seen_subcommand_from add" -l database-url -d 'PostgreSQL connection (URL or key=value; TLS as libpq: sslmode, sslrootcert, sslcert, sslkey; connect_timeout bounds the whole connect, 10 s by default); unset: the embedded local cluster under WF_HOME' -r
complete -c wf -n "__fish_wf_using_subcommand source; and __fish_seen_subcommand_from add" -l output -d 'Output format (`--json` is the short form of `--output json`) [default: table]' -r -f -a "table\t''
json\t''"
complete -c wf -n "__fish_wf_using_subcommand source; and __fish_seen_subcommand_from add" -l json -d 'Print exactly one JSON document on stdout'
complete -c wf -n "__fish_wf_using_subcommand source; and __fish_seen_subcommand_from add" -s q -l quiet -d 'Hide progress and informational messages'
complete -c wf -n "__fish_wf_using_subcommand source; and __fish_seen_subcommand_from add" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c wf -n "__fish_wf_using_subcommand source; and __fish_seen_subcommand_from list" -l database-url -d 'PostgreSQL connection (URL or key=value; TLS as libpq: sslmode, sslrootcert, sslcert, sslkey; connect_timeout bounds the whole connect, 10 s by default); unset: the embedded local cluster under WF_HOME' -r
complete -c wf -n "__fish_wf_using_subcommand source; and __fish_seen_subcommand_from list" -l output -d 'Output format (`--json` is the short form of `--output json`) [default: table]' -r -f -a "table\t''
json\t''"
complete -c wf -n "__fish_wf_using_subcommand source; and __fish_seen_subcommand_from list" -l json -d 'Print exactly one JSON document on stdout'
complete -c wf -n "__fish_wf_using_subcommand source; and __fish_seen_subcommand_from list" -s q -l quiet -d 'Hide progress and informational messages'
complete -c wf -n "__fish_wf_using_subcommand source; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help'
complete -c wf -n "__fish_wf_using_subcommand source; and __fish_seen_subcommand_from rm" -l database-url -d 'PostgreSQL connection (URL or key=value; TLS as libpq: sslmode, sslrootcert, sslcert, sslkey; connect_timeout bounds the whole connect, 10 s by default); unset: the embedded local cluster under WF_HOME' -r
complete -c wf -n "__fish_wf_using_subcommand source; and __fish_seen_subcommand_from rm" -l output -d 'Output format (`--json` is the short form of `--output json`) [default: table]' -r -f -a "table\t''
json\t''"
complete -c wf -n "__fish_wf_using_subcommand source; and __fish_seen_subcommand_from rm" -l yes -d 'Do not ask for confirmation'
complete -c wf -n "__fish_wf_using_subcommand source; and __fish_seen_subcommand_from rm" -l json -d 'Print exactly one JSON document on stdout'
complete -c wf -n "__fish_wf_using_subcommand source; and __fish_seen_subcommand_from rm" -s q -l quiet -d 'Hide progress and informational messages'
complete -c wf -n "__fish_wf_using_subcommand source; and __fish_seen_subcommand_from rm" -s h -l help -d 'Print help'
complete -c wf -n "__fish_wf_using_subcommand source; and __fish_seen_subcommand_from help" -f -a "add" -d 'Register a git source'
complete -c wf -n "__fish_wf_using_subcommand source; and __fish_seen_subcommand_from help" -f -a "list" -d 'List git sources'
complete -c wf -n "__fish_wf_using_subcommand source; and __fish_seen_subcommand_from help" -f -a "rm" -d 'Remove a git source and its actions from the catalog (jobs keep their pinned metadata)'
complete -c wf -n "__fish_wf_using_subcommand source; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c wf -n "__fish_wf_using_subcommand sync" -l ref -d 'A ref to sync (branch, tag, or any revision git understands; HEAD is the remote\'s; a name that is both a branch and a tag is refused: say refs/heads/NAME or refs/tags/NAME). The commit must be held by a branch or tag of the remote, as for --commit' -r
complete -c wf -n "__fish_wf_using_subcommand sync" -l commit -d 'An exact commit to sync, by its id (full, or 4 digits and more), held by a branch or tag of the remote' -r
complete -c wf -n "__fish_wf_using_subcommand sync" -l database-url -d 'PostgreSQL connection (URL or key=value; TLS as libpq: sslmode, sslrootcert, sslcert, sslkey; connect_timeout bounds the whole connect, 10 s by default); unset: the embedded local cluster under WF_HOME' -r
complete -c wf -n "__fish_wf_using_subcommand sync" -l output -d 'Output format (`--json` is the short form of `--output json`) [default: table]' -r -f -a "table\t''
json\t''"
complete -c wf -n "__fish_wf_using_subcommand sync" -l json -d 'Print exactly one JSON document on stdout'
complete -c wf -n "__fish_wf_using_subcommand sync" -s q -l quiet -d 'Hide progress and informational messages'
complete -c wf -n "__fish_wf_using_subcommand sync" -s h -l help -d 'Print help'
complete -c wf -n "__fish_wf_using_subcommand actions" -l source -d 'Only the actions of this source' -r
complete -c wf -n "__fish_wf_using_subcommand actions" -l database-url -d 'PostgreSQL connection (URL or key=value; TLS as libpq: sslmode, sslrootcert, sslcert, sslkey; connect_timeout bounds the whole connect, 10 s by default); unset: the embedded local cluster under WF_HOME' -r
complete -c wf -n "__fish_wf_using_subcommand actions" -l output -d 'Output format (`--json` is the short form of `--output json`) [default: table]' -r -f -a "table\t''
json\t''"
complete -c wf -n "__fish_wf_using_subcommand actions" -l json -d 'Print exactly one JSON document on stdout'
complete -c wf -n "__fish_wf_using_subcommand actions" -s q -l quiet -d 'Hide progress and informational messages'
complete -c wf -n "__fish_wf_using_subcommand actions" -s h -l help -d 'Print help'
complete -c wf -n "__fish_wf_using_subcommand enqueue" -l input -d 'Input: JSON text, @FILE, or - (or @-) for stdin' -r
complete -c wf -n "__fish_wf_using_subcommand enqueue" -l batch -d 'One job per line of this JSON Lines file (@FILE as for --input; - or @- for stdin; blank lines skipped), all in one transaction: read and inserted 5,000 lines at a time, so its size is not bounded by memory; a line that is not a JSON object or longer than 64 MiB, or an input the input schema refuses, enqueues none. A file whose name starts with @ is named ./@NAME' -r -F
complete -c wf -n "__fish_wf_using_subcommand enqueue" -l priority -d 'Higher runs first' -r
complete -c wf -n "__fish_wf_using_subcommand enqueue" -l tag -d 'Override the action\'s effective tag' -r
complete -c wf -n "__fish_wf_using_subcommand enqueue" -l at -d 'Run at this time: RFC 3339 (2026-12-01T09:00:00Z), or as tables print times (2026-12-01 10:00:00 +01:00). A time past is due at once, in its place: ahead of jobs due after it' -r
complete -c wf -n "__fish_wf_using_subcommand enqueue" -l in -d 'Run after this delay (30s, 5m, 2h, 30d)' -r
complete -c wf -n "__fish_wf_using_subcommand enqueue" -l trigger-kind -d 'What triggered the job, recorded with it (`WF_TRIGGER_KIND` of its attempts, `wf show`)' -r -f -a "manual\t''
api\t''
webhook\t''
schedule\t''"
complete -c wf -n "__fish_wf_using_subcommand enqueue" -l timeout -d 'Give up waiting after this long (exit 3)' -r
complete -c wf -n "__fish_wf_using_subcommand enqueue" -l key -d 'Idempotency key: while a job enqueued with this key exists, enqueueing again returns it (`"existing": true`) instead of a new one. At most 1,000 bytes' -r
complete -c wf -n "__fish_wf_using_subcommand enqueue" -l database-url -d 'PostgreSQL connection (URL or key=value; TLS as libpq: sslmode, sslrootcert, sslcert, sslkey; connect_timeout bounds the whole connect, 10 s by default); unset: the embedded local cluster under WF_HOME' -r
complete -c wf -n "__fish_wf_using_subcommand enqueue" -l output -d 'Output format (`--json` is the short form of `--output json`) [default: table]' -r -f -a "table\t''
json\t''"
complete -c wf -n "__fish_wf_using_subcommand enqueue" -l wait -d 'Wait for the job to finish and print its result (exit code as `wf result`)'
complete -c wf -n "__fish_wf_using_subcommand enqueue" -l json -d 'Print exactly one JSON document on stdout'
complete -c wf -n "__fish_wf_using_subcommand enqueue" -s q -l quiet -d 'Hide progress and informational messages'
complete -c wf -n "__fish_wf_using_subcommand enqueue" -s h -l help -d 'Print help'
complete -c wf -n "__fish_wf_using_subcommand work" -l tag -d 'Tags to take jobs from (repeatable)' -r
complete -c wf -n "__fish_wf_using_subcommand work" -l concurrency -d 'Jobs run at once' -r
complete -c wf -n "__fish_wf_using_subcommand work" -l max-jobs -d 'Exit after this many jobs' -r
complete -c wf -n "__fish_wf_using_subcommand work" -l heartbeat -d 'Heartbeat period (default WF_HEARTBEAT_S, 5s): at least 1s, at most a third of the zombie window' -r
complete -c wf -n "__fish_wf_using_subcommand work" -l grace -d 'On SIGINT/SIGTERM/SIGHUP, let running jobs finish for this long before putting them back (a second signal, or SIGQUIT: at once)' -r
complete -c wf -n "__fish_wf_using_subcommand work" -l name -d 'Worker name (default: host name and pid): printable, at most 200 characters' -r
complete -c wf -n "__fish_wf_using_subcommand work" -l isolation -d 'How actions are isolated. `sandbox`: every attempt in its own user, PID and mount namespaces, as an unprivileged user (for a root worker, nobody inside and a host uid of its own per attempt, from 1879048192 up), seeing only the system\'s read-only /usr, its pinned commit (read-only), a private work folder and /tmp, with the manifest\'s memory and process limits; the worker refuses to start where the kernel does not allow it. `none`: as the worker\'s own user on its file system, without limits' -r -f -a "sandbox\t''
none\t''"
complete -c wf -n "__fish_wf_using_subcommand work" -l allow-write -d 'A host folder bound read-write into every sandbox at the same path (repeatable; WF_ALLOW_WRITE takes a colon-separated list). The sandbox user must be allowed to write it: under a root worker, whose attempts each have a uid of their own, by the group nogroup (65534) or by all (its actions run with umask 002: what one makes there, the next may write). Bound at its real path; not one inside another; a symbolic link is followed only in a folder no one but root or the worker\'s user may write, and one in the path when an attempt starts fails it' -r -F
complete -c wf -n "__fish_wf_using_subcommand work" -l log-format -d 'How the worker writes its lines on stderr (one per job event: claimed, finished, killed, requeued): text, or one JSON object per line' -r -f -a "text\t''
json\t''"
complete -c wf -n "__fish_wf_using_subcommand work" -l database-url -d 'PostgreSQL connection (URL or key=value; TLS as libpq: sslmode, sslrootcert, sslcert, sslkey; connect_timeout bounds the whole connect, 10 s by default); unset: the embedded local cluster under WF_HOME' -r
complete -c wf -n "__fish_wf_using_subcommand work" -l output -d 'Output format (`--json` is the short form of `--output json`) [default: table]' -r -f -a "table\t''
json\t''"
complete -c wf -n "__fish_wf_using_subcommand work" -l drain -d 'Exit when no due, unclaimed job is left for these tags and all slots are idle. (With --drain, --once and --max-jobs, a claim refused for good, such as a permission the role lacks, ends the worker with exit 1; without them it is said once and tried again.)'
complete -c wf -n "__fish_wf_using_subcommand work" -l once -d 'Wait for one job, run it, exit'
complete -c wf -n "__fish_wf_using_subcommand work" -l no-reap -d 'Do not run periodic reaper passes'
complete -c wf -n "__fish_wf_using_subcommand work" -l json -d 'Print exactly one JSON document on stdout'
complete -c wf -n "__fish_wf_using_subcommand work" -s q -l quiet -d 'Hide progress and informational messages'
complete -c wf -n "__fish_wf_using_subcommand work" -s h -l help -d 'Print help'
complete -c wf -n "__fish_wf_using_subcommand cancel" -l app -d 'Every waiting or running job of this app' -r
complete -c wf -n "__fish_wf_using_subcommand cancel" -l action -d 'Every waiting or running job of this action (NAME, or APP/ACTION)' -r
complete -c wf -n "__fish_wf_using_subcommand cancel" -l tag -d 'Every waiting or running job of this tag' -r
complete -c wf -n "__fish_wf_using_subcommand cancel" -l status -d 'Only the jobs that stand so: queued (due), scheduled (not due yet) or running. Checked again as each is canceled: one that changed meanwhile (a worker started it) is left as it is, and one that failed meanwhile has its retry canceled only if the retry stands so' -r -f -a "queued\t''
scheduled\t''
running\t''"
complete -c wf -n "__fish_wf_using_subcommand cancel" -l reason -d 'Why, recorded with the cancel (`canceled_reason` in `wf show`)' -r
complete -c wf -n "__fish_wf_using_subcommand cancel" -l database-url -d 'PostgreSQL connection (URL or key=value; TLS as libpq: sslmode, sslrootcert, sslcert, sslkey; connect_timeout bounds the whole connect, 10 s by default); unset: the embedded local cluster under WF_HOME' -r
complete -c wf -n "__fish_wf_using_subcommand cancel" -l output -d 'Output format (`--json` is the short form of `--output json`) [default: table]' -r -f -a "table\t''
json\t''"
complete -c wf -n "__fish_wf_using_subcommand cancel" -l yes -d 'Do not ask for confirmation. Asked when more than one job is canceled (several ids still waiting or running, or the jobs that match); one is canceled at once, as `kill` does, and as scripts cancel a job'
complete -c wf -n "__fish_wf_using_subcommand cancel" -l json -d 'Print exactly one JSON document on stdout'
complete -c wf -n "__fish_wf_using_subcommand cancel" -s q -l quiet -d 'Hide progress and informational messages'
complete -c wf -n "__fish_wf_using_subcommand cancel" -s h -l help -d 'Print help'
complete -c wf -n "__fish_wf_using_subcommand rerun" -l database-url -d 'PostgreSQL connection (URL or key=value; TLS as libpq: sslmode, sslrootcert, sslcert, sslkey; connect_timeout bounds the whole connect, 10 s by default); unset: the embedded local cluster under WF_HOME' -r
complete -c wf -n "__fish_wf_using_subcommand rerun" -l output -d 'Output format (`--json` is the short form of `--output json`) [default: table]' -r -f -a "table\t''
json\t''"
complete -c wf -n "__fish_wf_using_subcommand rerun" -l latest -d 'Pin the action as the catalog shows it now (its current commit, schemas, timeout, tag), instead of exactly what the job ran'
complete -c wf -n "__fish_wf_using_subcommand rerun" -l json -d 'Print exactly one JSON document on stdout'
complete -c wf -n "__fish_wf_using_subcommand rerun" -s q -l quiet -d 'Hide progress and informational messages'
complete -c wf -n "__fish_wf_using_subcommand rerun" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c wf -n "__fish_wf_using_subcommand reap" -l zombie-timeout -d 'A running job whose last ping is older than this is a zombie (default WF_ZOMBIE_TIMEOUT_S); never sooner than the window its worker claimed it with (a worker that pings more slowly than this pass expects is not robbed of its job). From 1s to 7d' -r
complete -c wf -n "__fish_wf_using_subcommand reap" -l restart-limit -d 'Restarts before a dying job completes as failure (default WF_RESTART_LIMIT)' -r
complete -c wf -n "__fish_wf_using_subcommand reap" -l database-url -d 'PostgreSQL connection (URL or key=value; TLS as libpq: sslmode, sslrootcert, sslcert, sslkey; connect_timeout bounds the whole connect, 10 s by default); unset: the embedded local cluster under WF_HOME' -r
complete -c wf -n "__fish_wf_using_subcommand reap" -l output -d 'Output format (`--json` is the short form of `--output json`) [default: table]' -r -f -a "table\t''
json\t''"
complete -c wf -n "__fish_wf_using_subcommand reap" -l json -d 'Print exactly one JSON document on stdout'
complete -c wf -n "__fish_wf_using_subcommand reap" -s q -l quiet -d 'Hide progress and informational messages'
complete -c wf -n "__fish_wf_using_subcommand reap" -s h -l help -d 'Print help'
complete -c wf -n "__fish_wf_using_subcommand jobs" -l status -d 'Only jobs in this state' -r -f -a "queued\t''
scheduled\t''
running\t''
success\t''
failure\t''
canceled\t''"
complete -c wf -n "__fish_wf_using_subcommand jobs" -l app -d 'Only jobs of this app' -r
complete -c wf -n "__fish_wf_using_subcommand jobs" -l action -d 'Only jobs of this action (NAME, or APP/ACTION)' -r
complete -c wf -n "__fish_wf_using_subcommand jobs" -l tag -d 'Only jobs of this tag' -r
complete -c wf -n "__fish_wf_using_subcommand jobs" -l schedule -d 'Only jobs enqueued by this schedule' -r
complete -c wf -n "__fish_wf_using_subcommand jobs" -l since -d 'Only jobs created since this time (RFC 3339, or as `wf show` prints it: 2026-12-04 19:12:00 +00:00) or this long ago (30s, 5m, 2h, 30d)' -r
complete -c wf -n "__fish_wf_using_subcommand jobs" -l until -d 'Only jobs created before this time (RFC 3339, or as `wf show` prints it) or this long ago' -r
complete -c wf -n "__fish_wf_using_subcommand jobs" -l limit -d 'List at most this many jobs (newest first): one page' -r
complete -c wf -n "__fish_wf_using_subcommand jobs" -l page -d 'Which page of --limit jobs to list (1: the newest)' -r
complete -c wf -n "__fish_wf_using_subcommand jobs" -l database-url -d 'PostgreSQL connection (URL or key=value; TLS as libpq: sslmode, sslrootcert, sslcert, sslkey; connect_timeout bounds the whole connect, 10 s by default); unset: the embedded local cluster under WF_HOME' -r
complete -c wf -n "__fish_wf_using_subcommand jobs" -l output -d 'Output format (`--json` is the short form of `--output json`) [default: table]' -r -f -a "table\t''
json\t''"
complete -c wf -n "__fish_wf_using_subcommand jobs" -l watch -d 'List again every 2 seconds until interrupted'
complete -c wf -n "__fish_wf_using_subcommand jobs" -l json -d 'Print exactly one JSON document on stdout'
complete -c wf -n "__fish_wf_using_subcommand jobs" -s q -l quiet -d 'Hide progress and informational messages'
complete -c wf -n "__fish_wf_using_subcommand jobs" -s h -l help -d 'Print help'
complete -c wf -n "__fish_wf_using_subcommand show" -l database-url -d 'PostgreSQL connection (URL or key=value; TLS as libpq: sslmode, sslrootcert, sslcert, sslkey; connect_timeout bounds the whole connect, 10 s by default); unset: the embedded local cluster under WF_HOME' -r
complete -c wf -n "__fish_wf_using_subcommand show" -l output -d 'Output format (`--json` is the short form of `--output json`) [default: table]' -r -f -a "table\t''
json\t''"
complete -c wf -n "__fish_wf_using_subcommand show" -l json -d 'Print exactly one JSON document on stdout'
complete -c wf -n "__fish_wf_using_subcommand show" -s q -l quiet -d 'Hide progress and informational messages'
complete -c wf -n "__fish_wf_using_subcommand show" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c wf -n "__fish_wf_using_subcommand result" -l timeout -d 'Give up waiting after this long (exit 3)' -r
complete -c wf -n "__fish_wf_using_subcommand result" -l database-url -d 'PostgreSQL connection (URL or key=value; TLS as libpq: sslmode, sslrootcert, sslcert, sslkey; connect_timeout bounds the whole connect, 10 s by default); unset: the embedded local cluster under WF_HOME' -r
complete -c wf -n "__fish_wf_using_subcommand result" -l output -d 'Output format (`--json` is the short form of `--output json`) [default: table]' -r -f -a "table\t''
json\t''"
complete -c wf -n "__fish_wf_using_subcommand result" -l wait -d 'Wait until the job finishes'
complete -c wf -n "__fish_wf_using_subcommand result" -l json -d 'Print exactly one JSON document on stdout'
complete -c wf -n "__fish_wf_using_subcommand result" -s q -l quiet -d 'Hide progress and informational messages'
complete -c wf -n "__fish_wf_using_subcommand result" -s h -l help -d 'Print help'
complete -c wf -n "__fish_wf_using_subcommand logs" -l tail -d 'Only the last N lines (then new ones, with --follow)' -r
complete -c wf -n "__fish_wf_using_subcommand logs" -l since -d 'Only lines written since this time (RFC 3339, or as `wf show` prints it: 2026-12-04 19:12:00 +00:00) or this long ago (30s, 5m, 2h)' -r
complete -c wf -n "__fish_wf_using_subcommand logs" -l database-url -d 'PostgreSQL connection (URL or key=value; TLS as libpq: sslmode, sslrootcert, sslcert, sslkey; connect_timeout bounds the whole connect, 10 s by default); unset: the embedded local cluster under WF_HOME' -r
complete -c wf -n "__fish_wf_using_subcommand logs" -l output -d 'Output format (`--json` is the short form of `--output json`) [default: table]' -r -f -a "table\t''
json\t''"
complete -c wf -n "__fish_wf_using_subcommand logs" -s f -l follow -d 'Keep printing new lines until the job completes, then exit as `wf result` does: 0 success, 4 failure or canceled'
complete -c wf -n "__fish_wf_using_subcommand logs" -l timestamps -d 'Start each line with the time it was stored (local time zone, RFC 3339): a running job\'s lines are stored together at most a second apart'
complete -c wf -n "__fish_wf_using_subcommand logs" -l json -d 'Print exactly one JSON document on stdout'
complete -c wf -n "__fish_wf_using_subcommand logs" -s q -l quiet -d 'Hide progress and informational messages'
complete -c wf -n "__fish_wf_using_subcommand logs" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c wf -n "__fish_wf_using_subcommand status" -l database-url -d 'PostgreSQL connection (URL or key=value; TLS as libpq: sslmode, sslrootcert, sslcert, sslkey; connect_timeout bounds the whole connect, 10 s by default); unset: the embedded local cluster under WF_HOME' -r
complete -c wf -n "__fish_wf_using_subcommand status" -l output -d 'Output format (`--json` is the short form of `--output json`) [default: table]' -r -f -a "table\t''
json\t''"
complete -c wf -n "__fish_wf_using_subcommand status" -l json -d 'Print exactly one JSON document on stdout'
complete -c wf -n "__fish_wf_using_subcommand status" -s q -l quiet -d 'Hide progress and informational messages'
complete -c wf -n "__fish_wf_using_subcommand status" -s h -l help -d 'Print help'
complete -c wf -n "__fish_wf_using_subcommand workers" -l database-url -d 'PostgreSQL connection (URL or key=value; TLS as libpq: sslmode, sslrootcert, sslcert, sslkey; connect_timeout bounds the whole connect, 10 s by default); unset: the embedded local cluster under WF_HOME' -r
complete -c wf -n "__fish_wf_using_subcommand workers" -l output -d 'Output format (`--json` is the short form of `--output json`) [default: table]' -r -f -a "table\t''
json\t''"
complete -c wf -n "__fish_wf_using_subcommand workers" -l json -d 'Print exactly one JSON document on stdout'
complete -c wf -n "__fish_wf_using_subcommand workers" -s q -l quiet -d 'Hide progress and informational messages'
complete -c wf -n "__fish_wf_using_subcommand workers" -s h -l help -d 'Print help'
complete -c wf -n "__fish_wf_using_subcommand token; and not __fish_seen_subcommand_from verify help" -l database-url -d 'PostgreSQL connection (URL or key=value; TLS as libpq: sslmode, sslrootcert, sslcert, sslkey; connect_timeout bounds the whole connect, 10 s by default); unset: the embedded local cluster under WF_HOME' -r
complete -c wf -n "__fish_wf_using_subcommand token; and not __fish_seen_subcommand_from verify help" -l output -d 'Output format (`--json` is the short form of `--output json`) [default: table]' -r -f -a "table\t''
json\t''"
complete -c wf -n "__fish_wf_using_subcommand token; and not __fish_seen_subcommand_from verify help" -l json -d 'Print exactly one JSON document on stdout'
complete -c wf -n "__fish_wf_using_subcommand token; and not __fish_seen_subcommand_from verify help" -s q -l quiet -d 'Hide progress and informational messages'
complete -c wf -n "__fish_wf_using_subcommand token; and not __fish_seen_subcommand_from verify help" -s h -l help -d 'Print help'
complete -c wf -n "__fish_wf_using_subcommand token; and not __fish_seen_subcommand_from verify help" -f -a "verify" -d 'Print a token\'s claims; exit 1 when forged, malformed, expired, or no longer current (its attempt has ended, or the job is no longer that claim\'s)'
complete -c wf -n "__fish_wf_using_subcommand token; and not __fish_seen_subcommand_from verify help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c wf -n "__fish_wf_using_subcommand token; and __fish_seen_subcommand_from verify" -l database-url -d 'PostgreSQL connection (URL or key=value; TLS as libpq: sslmode, sslrootcert, sslcert, sslkey; connect_timeout bounds the whole connect, 10 s by default); unset: the embedded local cluster under WF_HOME' -r
complete -c wf -n "__fish_wf_using_subcommand token; and __fish_seen_subcommand_from verify" -l output -d 'Output format (`--json` is the short form of `--output json`) [default: table]' -r -f -a "table\t''
json\t''"
complete -c wf -n "__fish_wf_using_subcommand token; and __fish_seen_subcommand_from verify" -l json -d 'Print exactly one JSON document on stdout'
complete -c wf -n "__fish_wf_using_subcommand token; and __fish_seen_subcommand_from verify" -s q -l quiet -d 'Hide progress and informational messages'
complete -c wf -n "__fish_wf_using_subcommand token; and __fish_seen_subcommand_from verify" -s h -l help -d 'Print help'
complete -c wf -n "__fish_wf_using_subcommand token; and __fish_seen_subcommand_from help" -f -a "verify" -d 'Print a token\'s claims; exit 1 when forged, malformed, expired, or no longer current (its attempt has ended, or the job is no longer that claim\'s)'
complete -c wf -n "__fish_wf_using_subcommand token; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c wf -n "__fish_wf_using_subcommand schedule; and not __fish_seen_subcommand_from add list update rm pause resume tick help" -l database-url -d 'PostgreSQL connection (URL or key=value; TLS as libpq: sslmode, sslrootcert, sslcert, sslkey; connect_timeout bounds the whole connect, 10 s by default); unset: the embedded local cluster under WF_HOME' -r
complete -c wf -n "__fish_wf_using_subcommand schedule; and not __fish_seen_subcommand_from add list update rm pause resume tick help" -l output -d 'Output format (`--json` is the short form of `--output json`) [default: table]' -r -f -a "table\t''
json\t''"
complete -c wf -n "__fish_wf_using_subcommand schedule; and not __fish_seen_subcommand_from add list update rm pause resume tick help" -l json -d 'Print exactly one JSON document on stdout'
complete -c wf -n "__fish_wf_using_subcommand schedule; and not __fish_seen_subcommand_from add list update rm pause resume tick help" -s q -l quiet -d 'Hide progress and informational messages'
complete -c wf -n "__fish_wf_using_subcommand schedule; and not __fish_seen_subcommand_from add list update rm pause resume tick help" -s h -l help -d 'Print help'
complete -c wf -n "__fish_wf_using_subcommand schedule; and not __fish_seen_subcommand_from add list update rm pause resume tick help" -f -a "add" -d 'Add a schedule'
complete -c wf -n "__fish_wf_using_subcommand schedule; and not __fish_seen_subcommand_from add list update rm pause resume tick help" -f -a "list" -d 'List schedules: state, how far they are enqueued, their next fire time'
complete -c wf -n "__fish_wf_using_subcommand schedule; and not __fish_seen_subcommand_from add list update rm pause resume tick help" -f -a "update" -d 'Change a schedule\'s action, cron, time zone, input, priority, tag or overlap; the jobs it enqueued ahead are withdrawn and enqueued again at once as it now says (its runs\' retries stay). No fire time from before the update is enqueued as it now says'
complete -c wf -n "__fish_wf_using_subcommand schedule; and not __fish_seen_subcommand_from add list update rm pause resume tick help" -f -a "rm" -d 'Remove a schedule; the jobs it enqueued ahead and its runs\' retries waiting are withdrawn (canceled), the others stay; a run failing after it is not retried'
complete -c wf -n "__fish_wf_using_subcommand schedule; and not __fish_seen_subcommand_from add list update rm pause resume tick help" -f -a "pause" -d 'Stop enqueueing for a schedule; the jobs it enqueued ahead and its runs\' retries waiting are withdrawn (canceled); a run failing while it is paused is not retried. --json: {"name", "enabled", "withdrawn", "paused" (false: it was paused already)}'
complete -c wf -n "__fish_wf_using_subcommand schedule; and not __fish_seen_subcommand_from add list update rm pause resume tick help" -f -a "resume" -d 'Enqueue again for a paused schedule: at once, as a tick would, its fire times up to now + horizon (those missed while paused are not replayed)'
complete -c wf -n "__fish_wf_using_subcommand schedule; and not __fish_seen_subcommand_from add list update rm pause resume tick help" -f -a "tick" -d 'Enqueue every fire time up to now + horizon not yet enqueued; run it from cron every minute'
complete -c wf -n "__fish_wf_using_subcommand schedule; and not __fish_seen_subcommand_from add list update rm pause resume tick help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from add" -l cron -d 'Cron expression: 5 fields (minute hour day-of-month month day-of-week), 6 with seconds first, or 7 with a year last; or @yearly, @monthly, @weekly, @daily, @midnight, @hourly' -r
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from add" -l tz -d 'Time zone the cron expression is read in (IANA name, any case)' -r
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from add" -l input -d 'Input of every job: JSON text, @FILE, or - (or @-) for stdin' -r
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from add" -l priority -d 'Priority of every job (higher is claimed first)' -r
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from add" -l tag -d 'Override the action\'s effective tag' -r
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from add" -l database-url -d 'PostgreSQL connection (URL or key=value; TLS as libpq: sslmode, sslrootcert, sslcert, sslkey; connect_timeout bounds the whole connect, 10 s by default); unset: the embedded local cluster under WF_HOME' -r
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from add" -l output -d 'Output format (`--json` is the short form of `--output json`) [default: table]' -r -f -a "table\t''
json\t''"
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from add" -l no-overlap -d 'Skip a fire time while an earlier run of this schedule is still running'
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from add" -l json -d 'Print exactly one JSON document on stdout'
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from add" -s q -l quiet -d 'Hide progress and informational messages'
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from add" -s h -l help -d 'Print help'
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from list" -l database-url -d 'PostgreSQL connection (URL or key=value; TLS as libpq: sslmode, sslrootcert, sslcert, sslkey; connect_timeout bounds the whole connect, 10 s by default); unset: the embedded local cluster under WF_HOME' -r
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from list" -l output -d 'Output format (`--json` is the short form of `--output json`) [default: table]' -r -f -a "table\t''
json\t''"
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from list" -l json -d 'Print exactly one JSON document on stdout'
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from list" -s q -l quiet -d 'Hide progress and informational messages'
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help'
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from update" -l action -d 'Another action, APP/ACTION: one renamed, or removed by a sync (the schedule is broken)' -r
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from update" -l cron -d 'A new cron expression (as for `schedule add`)' -r
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from update" -l tz -d 'A new time zone' -r
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from update" -l input -d 'A new input: JSON text, @FILE, or - (or @-) for stdin' -r
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from update" -l priority -d 'A new priority of its jobs (higher is claimed first)' -r
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from update" -l tag -d 'A new tag override' -r
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from update" -l no-overlap -d 'Skip fire times while an earlier run is still running (`--no-overlap true`), or not' -r -f -a "true\t''
false\t''"
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from update" -l database-url -d 'PostgreSQL connection (URL or key=value; TLS as libpq: sslmode, sslrootcert, sslcert, sslkey; connect_timeout bounds the whole connect, 10 s by default); unset: the embedded local cluster under WF_HOME' -r
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from update" -l output -d 'Output format (`--json` is the short form of `--output json`) [default: table]' -r -f -a "table\t''
json\t''"
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from update" -l no-tag -d 'No tag override any more: the jobs go to the action\'s own tag'
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from update" -l json -d 'Print exactly one JSON document on stdout'
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from update" -s q -l quiet -d 'Hide progress and informational messages'
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from update" -s h -l help -d 'Print help'
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from rm" -l database-url -d 'PostgreSQL connection (URL or key=value; TLS as libpq: sslmode, sslrootcert, sslcert, sslkey; connect_timeout bounds the whole connect, 10 s by default); unset: the embedded local cluster under WF_HOME' -r
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from rm" -l output -d 'Output format (`--json` is the short form of `--output json`) [default: table]' -r -f -a "table\t''
json\t''"
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from rm" -l yes -d 'Do not ask for confirmation'
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from rm" -l json -d 'Print exactly one JSON document on stdout'
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from rm" -s q -l quiet -d 'Hide progress and informational messages'
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from rm" -s h -l help -d 'Print help'
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from pause" -l database-url -d 'PostgreSQL connection (URL or key=value; TLS as libpq: sslmode, sslrootcert, sslcert, sslkey; connect_timeout bounds the whole connect, 10 s by default); unset: the embedded local cluster under WF_HOME' -r
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from pause" -l output -d 'Output format (`--json` is the short form of `--output json`) [default: table]' -r -f -a "table\t''
json\t''"
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from pause" -l yes -d 'Accepted as before, when pause took the arguments of rm; it asks nothing'
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from pause" -l json -d 'Print exactly one JSON document on stdout'
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from pause" -s q -l quiet -d 'Hide progress and informational messages'
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from pause" -s h -l help -d 'Print help'
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from resume" -l horizon -d 'Enqueue fire times up to this far ahead at once: the horizon your ticks use' -r
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from resume" -l database-url -d 'PostgreSQL connection (URL or key=value; TLS as libpq: sslmode, sslrootcert, sslcert, sslkey; connect_timeout bounds the whole connect, 10 s by default); unset: the embedded local cluster under WF_HOME' -r
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from resume" -l output -d 'Output format (`--json` is the short form of `--output json`) [default: table]' -r -f -a "table\t''
json\t''"
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from resume" -l yes -d 'Accepted as before, when resume took the arguments of rm; it asks nothing'
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from resume" -l json -d 'Print exactly one JSON document on stdout'
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from resume" -s q -l quiet -d 'Hide progress and informational messages'
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from resume" -s h -l help -d 'Print help'
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from tick" -l horizon -d 'Enqueue fire times up to this far ahead (workers start them on time)' -r
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from tick" -l database-url -d 'PostgreSQL connection (URL or key=value; TLS as libpq: sslmode, sslrootcert, sslcert, sslkey; connect_timeout bounds the whole connect, 10 s by default); unset: the embedded local cluster under WF_HOME' -r
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from tick" -l output -d 'Output format (`--json` is the short form of `--output json`) [default: table]' -r -f -a "table\t''
json\t''"
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from tick" -l json -d 'Print exactly one JSON document on stdout'
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from tick" -s q -l quiet -d 'Hide progress and informational messages'
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from tick" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from help" -f -a "add" -d 'Add a schedule'
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from help" -f -a "list" -d 'List schedules: state, how far they are enqueued, their next fire time'
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from help" -f -a "update" -d 'Change a schedule\'s action, cron, time zone, input, priority, tag or overlap; the jobs it enqueued ahead are withdrawn and enqueued again at once as it now says (its runs\' retries stay). No fire time from before the update is enqueued as it now says'
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from help" -f -a "rm" -d 'Remove a schedule; the jobs it enqueued ahead and its runs\' retries waiting are withdrawn (canceled), the others stay; a run failing after it is not retried'
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from help" -f -a "pause" -d 'Stop enqueueing for a schedule; the jobs it enqueued ahead and its runs\' retries waiting are withdrawn (canceled); a run failing while it is paused is not retried. --json: {"name", "enabled", "withdrawn", "paused" (false: it was paused already)}'
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from help" -f -a "resume" -d 'Enqueue again for a paused schedule: at once, as a tick would, its fire times up to now + horizon (those missed while paused are not replayed)'
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from help" -f -a "tick" -d 'Enqueue every fire time up to now + horizon not yet enqueued; run it from cron every minute'
complete -c wf -n "__fish_wf_using_subcommand schedule; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c wf -n "__fish_wf_using_subcommand prune" -l older-than -d 'Delete jobs that completed before now minus this (e.g. 30d)' -r
complete -c wf -n "__fish_wf_using_subcommand prune" -l status -d 'Only jobs that ended with this status (with --older-than: it does not choose commits)' -r -f -a "success\t''
failure\t''
canceled\t''"
complete -c wf -n "__fish_wf_using_subcommand prune" -l database-url -d 'PostgreSQL connection (URL or key=value; TLS as libpq: sslmode, sslrootcert, sslcert, sslkey; connect_timeout bounds the whole connect, 10 s by default); unset: the embedded local cluster under WF_HOME' -r
complete -c wf -n "__fish_wf_using_subcommand prune" -l output -d 'Output format (`--json` is the short form of `--output json`) [default: table]' -r -f -a "table\t''
json\t''"
complete -c wf -n "__fish_wf_using_subcommand prune" -l sources -d 'Delete the synced commits no job pins any more (queued, running, or completed and not pruned) and the catalog is not on, from the database and from this host\'s store, and the file contents no commit holds any more; and this host\'s git mirrors of removed sources. After the jobs when both are given'
complete -c wf -n "__fish_wf_using_subcommand prune" -l dry-run -d 'Count what would be deleted, delete nothing (with --older-than and --sources: the commits the jobs\' pruning would free too)'
complete -c wf -n "__fish_wf_using_subcommand prune" -l yes -d 'Do not ask for confirmation'
complete -c wf -n "__fish_wf_using_subcommand prune" -l json -d 'Print exactly one JSON document on stdout'
complete -c wf -n "__fish_wf_using_subcommand prune" -s q -l quiet -d 'Hide progress and informational messages'
complete -c wf -n "__fish_wf_using_subcommand prune" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c wf -n "__fish_wf_using_subcommand bench" -l jobs -d 'Jobs per measurement (at most 2,000 for the enqueues of a transaction each)' -r
complete -c wf -n "__fish_wf_using_subcommand bench" -l workers -d 'Concurrent claimers for the claim-to-complete rate (each a connection: at most 64)' -r
complete -c wf -n "__fish_wf_using_subcommand bench" -l batch -d 'Jobs each claimer claims, and completes, per statement (as a worker claims for its idle slots); 1 is the seed\'s one job per claim' -r
complete -c wf -n "__fish_wf_using_subcommand bench" -l database-url -d 'PostgreSQL connection (URL or key=value; TLS as libpq: sslmode, sslrootcert, sslcert, sslkey; connect_timeout bounds the whole connect, 10 s by default); unset: the embedded local cluster under WF_HOME' -r
complete -c wf -n "__fish_wf_using_subcommand bench" -l output -d 'Output format (`--json` is the short form of `--output json`) [default: table]' -r -f -a "table\t''
json\t''"
complete -c wf -n "__fish_wf_using_subcommand bench" -l bun -d 'Also measure end to end with a trivial bun action (at most 200 jobs), with and without the sandbox, the same action warm (at most 5,000 jobs), and a bare loop starting bun for each job, taking turns in 4 rounds (a worker\'s run timed from its first claim to its last completion); for each, the processor time per job of wf and every process it started (`cpu ms/job`), and of the database server when it runs on this host (`db cpu ms/job`, also for claim + complete)'
complete -c wf -n "__fish_wf_using_subcommand bench" -l floor -d 'Also measure the floor: the seed\'s minimal claim and completion statements, prepared, on a scratch schema, over the same connections, in 5 rounds alternating with claim + complete (a change in the host\'s speed weighs on both alike); prints the spine\'s rate against it'
complete -c wf -n "__fish_wf_using_subcommand bench" -l json -d 'Print exactly one JSON document on stdout'
complete -c wf -n "__fish_wf_using_subcommand bench" -s q -l quiet -d 'Hide progress and informational messages'
complete -c wf -n "__fish_wf_using_subcommand bench" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c wf -n "__fish_wf_using_subcommand help; and not __fish_seen_subcommand_from db source sync actions enqueue work cancel rerun reap jobs show result logs status workers token schedule prune bench help" -f -a "db" -d 'Manage the database: the embedded cluster and migrations'
complete -c wf -n "__fish_wf_using_subcommand help; and not __fish_seen_subcommand_from db source sync actions enqueue work cancel rerun reap jobs show result logs status workers token schedule prune bench help" -f -a "source" -d 'Manage git sources of actions'
complete -c wf -n "__fish_wf_using_subcommand help; and not __fish_seen_subcommand_from db source sync actions enqueue work cancel rerun reap jobs show result logs status workers token schedule prune bench help" -f -a "sync" -d 'Fetch a source, materialize a commit into the store (marker last), then update the catalog'
complete -c wf -n "__fish_wf_using_subcommand help; and not __fish_seen_subcommand_from db source sync actions enqueue work cancel rerun reap jobs show result logs status workers token schedule prune bench help" -f -a "actions" -d 'List the catalog of actions'
complete -c wf -n "__fish_wf_using_subcommand help; and not __fish_seen_subcommand_from db source sync actions enqueue work cancel rerun reap jobs show result logs status workers token schedule prune bench help" -f -a "enqueue" -d 'Enqueue a job (or a batch of jobs) through the single enqueue path'
complete -c wf -n "__fish_wf_using_subcommand help; and not __fish_seen_subcommand_from db source sync actions enqueue work cancel rerun reap jobs show result logs status workers token schedule prune bench help" -f -a "work" -d 'Run a worker: claim jobs, run them with bun, heartbeat, complete'
complete -c wf -n "__fish_wf_using_subcommand help; and not __fish_seen_subcommand_from db source sync actions enqueue work cancel rerun reap jobs show result logs status workers token schedule prune bench help" -f -a "cancel" -d 'Cancel jobs: waiting ones at once, running ones by a mark their worker acts on'
complete -c wf -n "__fish_wf_using_subcommand help; and not __fish_seen_subcommand_from db source sync actions enqueue work cancel rerun reap jobs show result logs status workers token schedule prune bench help" -f -a "rerun" -d 'Enqueue a job again, with the same input, through the single enqueue path'
complete -c wf -n "__fish_wf_using_subcommand help; and not __fish_seen_subcommand_from db source sync actions enqueue work cancel rerun reap jobs show result logs status workers token schedule prune bench help" -f -a "reap" -d 'Run one reaper pass: recover jobs whose worker stopped sending heartbeats'
complete -c wf -n "__fish_wf_using_subcommand help; and not __fish_seen_subcommand_from db source sync actions enqueue work cancel rerun reap jobs show result logs status workers token schedule prune bench help" -f -a "jobs" -d 'List jobs, newest first'
complete -c wf -n "__fish_wf_using_subcommand help; and not __fish_seen_subcommand_from db source sync actions enqueue work cancel rerun reap jobs show result logs status workers token schedule prune bench help" -f -a "show" -d 'Show everything about one job'
complete -c wf -n "__fish_wf_using_subcommand help; and not __fish_seen_subcommand_from db source sync actions enqueue work cancel rerun reap jobs show result logs status workers token schedule prune bench help" -f -a "result" -d 'Print a job\'s result (exit 4 when it failed or was canceled, 3 when not finished)'
complete -c wf -n "__fish_wf_using_subcommand help; and not __fish_seen_subcommand_from db source sync actions enqueue work cancel rerun reap jobs show result logs status workers token schedule prune bench help" -f -a "logs" -d 'Print a job\'s logs'
complete -c wf -n "__fish_wf_using_subcommand help; and not __fish_seen_subcommand_from db source sync actions enqueue work cancel rerun reap jobs show result logs status workers token schedule prune bench help" -f -a "status" -d 'Queue depth per tag: queued, scheduled, running, zombies, oldest wait (since the oldest waiting job was due: one enqueued with a past --at counts from that time)'
complete -c wf -n "__fish_wf_using_subcommand help; and not __fish_seen_subcommand_from db source sync actions enqueue work cancel rerun reap jobs show result logs status workers token schedule prune bench help" -f -a "workers" -d 'Workers, live and recently gone: their tags, slots, current jobs and last beat'
complete -c wf -n "__fish_wf_using_subcommand help; and not __fish_seen_subcommand_from db source sync actions enqueue work cancel rerun reap jobs show result logs status workers token schedule prune bench help" -f -a "token" -d 'Verify WF_TOKEN tokens'
complete -c wf -n "__fish_wf_using_subcommand help; and not __fish_seen_subcommand_from db source sync actions enqueue work cancel rerun reap jobs show result logs status workers token schedule prune bench help" -f -a "schedule" -d 'Cron schedules that enqueue jobs through the single enqueue path'
complete -c wf -n "__fish_wf_using_subcommand help; and not __fish_seen_subcommand_from db source sync actions enqueue work cancel rerun reap jobs show result logs status workers token schedule prune bench help" -f -a "prune" -d 'Delete completed jobs (records, logs) older than a cutoff, in batches'
complete -c wf -n "__fish_wf_using_subcommand help; and not __fish_seen_subcommand_from db source sync actions enqueue work cancel rerun reap jobs show result logs status workers token schedule prune bench help" -f -a "bench" -d 'Measure the spine on the configured database (in a tag of its own, cleaned up after)'
complete -c wf -n "__fish_wf_using_subcommand help; and not __fish_seen_subcommand_from db source sync actions enqueue work cancel rerun reap jobs show result logs status workers token schedule prune bench help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c wf -n "__fish_wf_using_subcommand help; and __fish_seen_subcommand_from db" -f -a "up" -d 'Create (if needed) and start the embedded cluster, then migrate it'
complete -c wf -n "__fish_wf_using_subcommand help; and __fish_seen_subcommand_from db" -f -a "down" -d 'Stop the embedded cluster (fast shutdown), and keep it stopped until `wf db up`'
complete -c wf -n "__fish_wf_using_subcommand help; and __fish_seen_subcommand_from db" -f -a "status" -d 'Show the database\'s state, the schema version, and whether the connection is encrypted'
complete -c wf -n "__fish_wf_using_subcommand help; and __fish_seen_subcommand_from db" -f -a "migrate" -d 'Apply pending migrations to the configured database'
complete -c wf -n "__fish_wf_using_subcommand help; and __fish_seen_subcommand_from source" -f -a "add" -d 'Register a git source'
complete -c wf -n "__fish_wf_using_subcommand help; and __fish_seen_subcommand_from source" -f -a "list" -d 'List git sources'
complete -c wf -n "__fish_wf_using_subcommand help; and __fish_seen_subcommand_from source" -f -a "rm" -d 'Remove a git source and its actions from the catalog (jobs keep their pinned metadata)'
complete -c wf -n "__fish_wf_using_subcommand help; and __fish_seen_subcommand_from token" -f -a "verify" -d 'Print a token\'s claims; exit 1 when forged, malformed, expired, or no longer current (its attempt has ended, or the job is no longer that claim\'s)'
complete -c wf -n "__fish_wf_using_subcommand help; and __fish_seen_subcommand_from schedule" -f -a "add" -d 'Add a schedule'
complete -c wf -n "__fish_wf_using_subcommand help; and __fish_seen_subcommand_from schedule" -f -a "list" -d 'List schedules: state, how far they are enqueued, their next fire time'
complete -c wf -n "__fish_wf_using_subcommand help; and __fish_seen_subcommand_from schedule" -f -a "update" -d 'Change a schedule\'s action, cron, time zone, input, priority, tag or overlap; the jobs it enqueued ahead are withdrawn and enqueued again at once as it now says (its runs\' retries stay). No fire time from before the update is enqueued as it now says'
complete -c wf -n "__fish_wf_using_subcommand help; and __fish_seen_subcommand_from schedule" -f -a "rm" -d 'Remove a schedule; the jobs it enqueued ahead and its runs\' retries waiting are withdrawn (canceled), the others stay; a run failing after it is not retried'
complete -c wf -n "__fish_wf_using_subcommand help; and __fish_seen_subcommand_from schedule" -f -a "pause" -d 'Stop enqueueing for a schedule; the jobs it enqueued ahead and its runs\' retries waiting are withdrawn (canceled); a run failing while it is paused is not retried. --json: {"name", "enabled", "withdrawn", "paused" (false: it was paused already)}'
complete -c wf -n "__fish_wf_using_subcommand help; and __fish_seen_subcommand_from schedule" -f -a "resume" -d 'Enqueue again for a paused schedule: at once, as a tick would, its fire times up to now + horizon (those missed while paused are not replayed)'
complete -c wf -n "__fish_wf_using_subcommand help; and __fish_seen_subcommand_from schedule" -f -a "tick" -d 'Enqueue every fire time up to now + horizon not yet enqueued; run it from cron every minute'
