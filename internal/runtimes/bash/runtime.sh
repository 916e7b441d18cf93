# airlock bash session runtime (see docs/runtime-protocol.md, "Bash").
#
# Started as `bash --noprofile --norc /opt/airlock/bash/runtime.sh` with
# fd 3 the control socket. The loop reads one NUL-terminated block of code
# from fd 3, runs it in this shell, and writes the block's exit status as
# decimal digits followed by NUL back to fd 3. State (working directory,
# variables, arrays, functions, exports, options, positional parameters)
# persists from block to block.
#
# How a block runs
#   The loop sources this very file with __airlock_mode=exec; the branch
#   right below evals the block. Sourcing (rather than calling a function)
#   matters: a sourced file runs in the global scope, so `declare`,
#   `declare -A` and `set -- ...` behave as at a prompt, but it is still a
#   "subroutine" that `return` (and the unwinding below) can leave.
#   While the block runs fd 3 is closed (`3>&-`): programs the block starts
#   never inherit the control socket, and the block may use fd 3 itself
#   (`exec 3>file`); bash restores the socket when the block ends.
#
# Interrupts
#   The server sends SIGINT to the process group. Foreground commands die of
#   it; the runtime's INT trap then "unwinds" the block: with extdebug on, a
#   DEBUG trap returns from every function and from the sourced block before
#   their next command runs, so loops such as `while :; do sleep 1; done`
#   stop too. The block's status is 130 and the loop goes on. SIGINT while
#   no block runs is ignored. Before each SIGINT the server sends a block of
#   no bytes, the interrupt mark: the shell looks for one as a block starts
#   (its SIGINT may have come before, while the shell was idle), and then
#   reports 130 without running the block; one read between blocks (its
#   block had ended) is skipped. Background jobs (`cmd &`) ignore SIGINT, as in
#   any non-interactive shell, and keep running.
#   A SIGINT that lands in a command's child between its fork and its exec
#   is taken by the child's copy of the INT trap, and the program never
#   sees it; bash runs its own trap only once that program ends. So the
#   server repeats SIGINT until the block's status is read, and the trap,
#   once it has run, ignores SIGINT for the rest of the block (the user's
#   INT trap runs once; the commands it starts inherit the ignoring).
#
# exit and set -e
#   `exit [n]` in a block ends the block with status n (default: the last
#   status); the shell and its state survive, as Python's SystemExit does
#   in the Python runtime. (In a subshell or child shell exit is the real
#   one.) A command failing under `set -e` likewise ends the block with its
#   status (the ERR trap sees it first, with errtrace forced on while
#   blocks run); errexit stays on for the next blocks. `builtin exit`,
#   `exec cmd` and bash's fatal errors in a non-interactive shell (an unset
#   variable under `set -u`, `${var:?msg}`) do end the shell: the runtime
#   then reports the block's status if it can and the server sees the
#   control socket close.
#
# Traps
#   User traps on INT, ERR and EXIT are recorded rather than installed (the
#   `trap` builtin is wrapped); the runtime's own handlers run them first,
#   so `trap 'rm -f "$tmp"' INT EXIT` works and interrupts still stop the
#   block. A user DEBUG trap is installed as usual and put back after an
#   unwinding. `trap -p` shows the runtime's handlers.
#
# The runtime's names all start with __airlock_ (plus the `exit` and `trap`
# wrappers); blocks that change them, disable builtins, or redefine
# `builtin` can break the runtime.

# --- block execution (this file sourced by the loop below) ------------------
if [[ ${__airlock_mode-} == exec ]]; then
    __airlock_mode=
    case $__airlock_flags in *x*) builtin set -x ;; esac
    # $? starts as the previous block's status, as at a prompt.
    if __airlock_setst "$__airlock_last"; then
        builtin eval "$__airlock_code"
    else
        builtin eval "$__airlock_code"
    fi
    __airlock_status=$?
    builtin return 0
fi

# --- set-up -----------------------------------------------------------------
__airlock_pid=$BASHPID
__airlock_self=${BASH_SOURCE[0]}
[[ $__airlock_self == /* ]] || __airlock_self=$PWD/$__airlock_self
# Identity of the control socket (e.g. "socket:[1234]"), used only to find
# bash's saved copy of it if the shell dies in the middle of a block.
__airlock_ctl_link=$(readlink /proc/self/fd/3 2>/dev/null)
__airlock_flags=$-        # shell options to restore before the next block
__airlock_running=        # non-empty while a block runs
__airlock_interrupted=    # SIGINT arrived during this block
__airlock_errexit=        # set -e was on when the block ended (or fired)
__airlock_status=         # status decided by the block or a handler
__airlock_last=0          # status of the previous block
__airlock_unwinding=      # the DEBUG trap is unwinding the block
declare -A __airlock_utrap=() # user traps on INT, ERR, EXIT, DEBUG

# __airlock_setst returns $1. `if __airlock_setst N; then A; else A; fi`
# runs A with $? set to N without a failing simple command (which would
# fire the ERR trap).
__airlock_setst() { builtin return "$1"; }

# __airlock_run_utrap runs the user's trap action for $1 with $? set to $2.
__airlock_run_utrap() {
    [[ -n ${__airlock_utrap[$1]-} ]] || builtin return 0
    if __airlock_setst "$2"; then
        builtin eval "${__airlock_utrap[$1]}"
    else
        builtin eval "${__airlock_utrap[$1]}"
    fi
}

# __airlock_unwind makes the DEBUG trap return from every function and
# from the sourced block before their next command runs.
__airlock_unwind() {
    [[ $__airlock_unwinding ]] && builtin return 0
    __airlock_unwinding=1
    builtin shopt -q extdebug && __airlock_unwinding=keep-extdebug
    builtin shopt -s extdebug
    builtin trap 'if (( ${#BASH_SOURCE[@]} > 1 )); then builtin return 2; fi' DEBUG
}

# __airlock_on_int is the INT trap.
__airlock_on_int() {
    [[ ${__airlock_running-} && $BASHPID == "$__airlock_pid" ]] || builtin return 0
    builtin trap '' INT # the server's repeats (see Interrupts), until the block ends
    __airlock_run_utrap INT 130
    __airlock_interrupted=1
    if [[ $- == *e* ]]; then __airlock_errexit=1; builtin set +e; fi
    __airlock_unwind
}

# __airlock_on_err runs from the ERR trap with the failed status. Under
# set -e it turns errexit off before bash acts on it (so the shell does not
# exit), remembers that it was on, and ends the block with the status.
__airlock_on_err() {
    [[ ${__airlock_running-} && $BASHPID == "$__airlock_pid" && $- == *e* ]] || builtin return 0
    __airlock_errexit=1
    builtin set +e
    [[ -n $__airlock_status ]] || __airlock_status=$1
    __airlock_unwind
}

# __airlock_on_exit is the EXIT trap: the user's EXIT trap, then, if the
# shell is dying in the middle of a block (fatal shell error, builtin exit,
# exec), a best-effort status report so the server does not wait for one.
__airlock_on_exit() {
    local st=$? fd f
    __airlock_run_utrap EXIT "$st"
    [[ ${__airlock_running-} && $BASHPID == "$__airlock_pid" ]] || builtin return "$st"
    __airlock_running=
    # fd 3 is closed while a block runs; bash keeps the socket on a
    # close-on-exec descriptor >= 10 to restore it afterwards.
    [[ -n $__airlock_ctl_link ]] || builtin return "$st"
    for f in /proc/$BASHPID/fd/*; do
        fd=${f##*/}
        [[ $fd =~ ^[0-9]+$ ]] && (( fd >= 10 )) || continue
        [[ $(readlink "$f" 2>/dev/null) == "$__airlock_ctl_link" ]] || continue
        builtin printf '%d\0' "$st" >&"$fd"
        break
    done 2>/dev/null
    builtin return "$st"
}

# exit ends the running block with status $1 (default: the last status)
# and keeps the shell; anywhere else (subshells, trap actions while idle) it
# is the builtin.
exit() {
    local st=$?
    if [[ ${__airlock_running-} && $BASHPID == "$__airlock_pid" ]]; then
        if (( $# )); then
            if [[ $1 =~ ^-?[0-9]+$ ]]; then
                st=$(( $1 & 255 ))
            else
                builtin printf 'bash: exit: %s: numeric argument required\n' "$1" >&2
                st=2
            fi
        fi
        __airlock_status=$st
        if [[ $- == *e* ]]; then __airlock_errexit=1; builtin set +e; fi
        __airlock_unwind
        builtin return "$st"
    fi
    builtin exit "$@"
}

# trap records the user's INT, ERR and EXIT actions (the runtime's handlers
# run them) and passes everything else to the builtin. DEBUG is recorded
# and installed, so that an unwinding can put it back.
trap() {
    if [[ $BASHPID != "$__airlock_pid" ]]; then builtin trap "$@"; builtin return; fi
    case ${1-} in
    -*[lp]*) builtin trap "$@"; builtin return ;;
    --) shift ;;
    esac
    (( $# )) || { builtin trap; builtin return; }
    local action sig name rest=() st=0
    if (( $# == 1 )); then action=-; else action=$1; shift; fi
    for sig; do
        name=${sig^^}; name=${name#SIG}
        case $name in 0) name=EXIT ;; 2) name=INT ;; esac
        case $name in
        INT|ERR|EXIT|DEBUG)
            if [[ $action == - ]]; then unset '__airlock_utrap[$name]'; else __airlock_utrap[$name]=$action; fi
            if [[ $name == DEBUG ]]; then builtin trap -- "$action" DEBUG || st=$?; fi
            ;;
        *) rest+=("$sig") ;;
        esac
    done
    if (( ${#rest[@]} )); then builtin trap -- "$action" "${rest[@]}" || st=$?; fi
    builtin return "$st"
}

builtin trap __airlock_on_int INT
# The ERR action runs the user's ERR trap inline (so that $LINENO and
# $BASH_COMMAND are the failing command's), for failures inside a block only.
builtin trap '__airlock_e=$?
if [[ ${__airlock_running-} && -n ${__airlock_utrap[ERR]-} ]] && (( ${#BASH_SOURCE[@]} > 1 )); then
    if __airlock_setst "$__airlock_e"; then :; else builtin eval "${__airlock_utrap[ERR]}"; fi
fi
__airlock_on_err "$__airlock_e"' ERR
builtin trap __airlock_on_exit EXIT

# --- the loop ---------------------------------------------------------------
# It runs at the top level (not in a function) so that the sourced block
# runs in the global scope.
while :; do
    # Read one NUL-terminated block. A SIGINT while idle interrupts read
    # (status > 128) after the trap ran: keep what was read and go on.
    __airlock_code=
    while :; do
        IFS= builtin read -r -d '' -u 3 __airlock_part
        __airlock_rc=$?
        __airlock_code+=$__airlock_part
        (( __airlock_rc == 0 )) && break
        (( __airlock_rc > 128 )) && continue
        # End of file (or a broken socket): the server is gone.
        builtin exit 0
    done

    # A block of no bytes is the server's interrupt mark, which follows the
    # block it interrupts; here, one for a block that has ended: nothing.
    [[ -n $__airlock_code ]] || continue

    # A block of nothing but blanks is an empty cell: it does nothing, and
    # $? stays what the previous block left, as after an empty line at a
    # prompt.
    if [[ $__airlock_code != *[![:space:]]* ]]; then
        builtin printf '0\0' >&3
        continue
    fi

    # Run it with the options the user left on, errtrace forced on so the
    # ERR trap sees failures inside functions.
    __airlock_running=1 __airlock_interrupted= __airlock_status=
    # An interrupt that came before the block started: its SIGINT found the
    # shell idle (ignored), but its mark, sent after the block and before
    # the SIGINT, is on the socket by now. The block does not run.
    if builtin read -t 0 -u 3; then
        IFS= builtin read -r -d '' -u 3 __airlock_part
        [[ -z $__airlock_part ]] || builtin exit 2 # only marks come while a block runs
        __airlock_interrupted=1 __airlock_code=:
    fi
    [[ $__airlock_errexit ]] && builtin set -e
    [[ $__airlock_flags == *u* ]] && builtin set -u
    [[ $__airlock_flags == *v* ]] && builtin set -v
    builtin set -E
    __airlock_errexit=
    __airlock_mode=exec
    builtin source "$__airlock_self" 3>&-
    {
        __airlock_rc=$?
        # Save the user's options and turn off what would disturb the loop.
        __airlock_flags=$-
        [[ $__airlock_flags == *e* ]] && __airlock_errexit=1
        builtin set +euxvE
        __airlock_running=
        builtin trap __airlock_on_int INT
        if [[ $__airlock_unwinding ]]; then
            if [[ -n ${__airlock_utrap[DEBUG]-} ]]; then
                builtin trap -- "${__airlock_utrap[DEBUG]}" DEBUG
            else
                builtin trap - DEBUG
            fi
            [[ $__airlock_unwinding == keep-extdebug ]] || builtin shopt -u extdebug
            __airlock_unwinding=
        fi
    } 2>&-
    if [[ $__airlock_interrupted ]]; then
        __airlock_rc=130
    elif [[ -n $__airlock_status ]]; then
        __airlock_rc=$__airlock_status
    fi
    __airlock_last=$__airlock_rc
    builtin printf '%d\0' "$__airlock_rc" >&3
done
