//! The system calls a sandboxed action may not make: a seccomp filter that bun and everything it
//! starts inherit, installed last before bun's exec.
//!
//! A list of what is refused, everything else allowed: actions run arbitrary programs, and an allow
//! list would break the next runtime release that uses a call it lacks. What it refuses is the
//! kernel's surface that no action needs and that has the longest record of privilege escalations
//! (BPF, perf events, io_uring, userfaultfd, the keyrings, x86's LDT), the calls that reach into
//! another process (its memory, its descriptors), files by handle, mounts, entering namespaces and
//! the machine's calls (its name, clock, ports, modules: which the action has no capability for,
//! refused before the kernel reads their arguments). Those fail with
//! EPERM. Making namespaces is left to the kernel, which refuses the action (no capability, and no
//! user namespace in the sandbox): `clone3` takes its flags in memory, which a filter cannot read.
//! A call by another ABI (32-bit `int 0x80`, x32) fails with ENOSYS: the list is of 64-bit
//! numbers, which those ABIs would get past.
//!
//! A short BPF program written here rather than made with seccompiler: its rules match exact syscall
//! numbers, so a deny list made with it lets the x32 numbers (the same call plus 0x40000000) through.

use std::io;

/// Refused with EPERM.
const DENIED: &[libc::c_long] = &[
    libc::SYS_add_key,
    libc::SYS_keyctl,
    libc::SYS_request_key,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_process_madvise,
    libc::SYS_pidfd_getfd,
    libc::SYS_kcmp,
    libc::SYS_name_to_handle_at,
    libc::SYS_open_by_handle_at,
    libc::SYS_setns,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_open_tree,
    SYS_OPEN_TREE_ATTR,
    libc::SYS_move_mount,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    SYS_STATMOUNT,
    SYS_LISTMOUNT,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_modify_ldt,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_iopl,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_ioperm,
    libc::SYS_sethostname,
    libc::SYS_setdomainname,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_reboot,
    libc::SYS_acct,
    libc::SYS_quotactl,
    libc::SYS_syslog,
];

/// `statmount` and `listmount` (Linux 6.8) and `open_tree_attr` (6.15), the same numbers on x86_64
/// and aarch64; not in libc yet.
const SYS_STATMOUNT: libc::c_long = 457;
const SYS_LISTMOUNT: libc::c_long = 458;
const SYS_OPEN_TREE_ATTR: libc::c_long = 467;

/// `AUDIT_ARCH_*` of this build: the ABI whose numbers `DENIED` holds.
#[cfg(target_arch = "x86_64")]
const ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const ARCH: u32 = 0xC000_00B7;
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("the sandbox's seccomp filter knows the system calls of x86_64 and aarch64 only");

/// x32's calls are x86_64's numbers with this bit set, under x86_64's `ARCH`.
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: Option<u32> = Some(0x4000_0000);
#[cfg(not(target_arch = "x86_64"))]
const X32_SYSCALL_BIT: Option<u32> = None;

/// Install the filter on this thread and what it execs and starts (no_new_privs must be set).
pub(super) fn install() -> io::Result<()> {
    apply(&program())
}

/// Install `program` (which allocates nothing: a forked child of a threaded process may call it).
fn apply(program: &[libc::sock_filter]) -> io::Result<()> {
    let len = u16::try_from(program.len()).map_err(|_| io::Error::other("the seccomp filter is too long"))?;
    let fprog = libc::sock_fprog { len, filter: program.as_ptr().cast_mut() };
    // SAFETY: a filter program that outlives the call, with its true length; no flags.
    let result = unsafe {
        libc::syscall(libc::SYS_seccomp, libc::SECCOMP_SET_MODE_FILTER, 0u32, &fprog as *const libc::sock_fprog)
    };
    if result == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// The filter: the ABI checked first, then each refused number in turn, then allow.
fn program() -> Vec<libc::sock_filter> {
    const LOAD: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    const JEQ: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    const JGE: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
    const RET: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    let arch = std::mem::offset_of!(libc::seccomp_data, arch) as u32;
    let nr = std::mem::offset_of!(libc::seccomp_data, nr) as u32;
    let load = |offset| libc::sock_filter { code: LOAD, jt: 0, jf: 0, k: offset };
    let ret = |action| libc::sock_filter { code: RET, jt: 0, jf: 0, k: action };

    // The checks of the ABI, then DENIED, then the three returns: allow, EPERM, ENOSYS.
    let checks = 3 + usize::from(X32_SYSCALL_BIT.is_some());
    let allow = checks + DENIED.len();
    let (eperm, enosys) = (allow + 1, allow + 2);
    // A jump's offset counts from the instruction after the jump.
    let to = |target: usize, from: usize| u8::try_from(target - from - 1).expect("the filter's jumps are short");
    let mut program = vec![load(arch), libc::sock_filter { code: JEQ, jt: 0, jf: to(enosys, 1), k: ARCH }, load(nr)];
    if let Some(bit) = X32_SYSCALL_BIT {
        program.push(libc::sock_filter { code: JGE, jt: to(enosys, 3), jf: 0, k: bit });
    }
    for &call in DENIED {
        let at = program.len();
        program.push(libc::sock_filter { code: JEQ, jt: to(eperm, at), jf: 0, k: call as u32 });
    }
    program.push(ret(libc::SECCOMP_RET_ALLOW));
    program.push(ret(libc::SECCOMP_RET_ERRNO | libc::EPERM as u32));
    program.push(ret(libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32));
    program
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `program` answers for a call `nr` by the ABI `arch`: the instructions it is made of, run
    /// as the kernel runs them. Whatever the kernel under the tests knows (x32 or not), every path
    /// of the program is taken.
    fn verdict(arch: u32, nr: u32) -> u32 {
        let program = program();
        let (arch_at, nr_at) =
            (std::mem::offset_of!(libc::seccomp_data, arch), std::mem::offset_of!(libc::seccomp_data, nr));
        let (mut at, mut accumulator) = (0, 0u32);
        loop {
            let instruction = program[at];
            let code = u32::from(instruction.code);
            at += 1;
            match code {
                _ if code == libc::BPF_LD | libc::BPF_W | libc::BPF_ABS => {
                    accumulator = match instruction.k as usize {
                        offset if offset == arch_at => arch,
                        offset if offset == nr_at => nr,
                        offset => panic!("a load of offset {offset}"),
                    }
                }
                _ if code == libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K
                    || code == libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K =>
                {
                    let taken = if code & libc::BPF_JGE == libc::BPF_JGE {
                        accumulator >= instruction.k
                    } else {
                        accumulator == instruction.k
                    };
                    at += usize::from(if taken { instruction.jt } else { instruction.jf });
                }
                _ if code == libc::BPF_RET | libc::BPF_K => return instruction.k,
                _ => panic!("an instruction of code {code:#x}"),
            }
        }
    }

    #[test]
    fn the_program_refuses_each_listed_call_and_every_call_of_another_abi_and_allows_the_rest() {
        let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
        let enosys = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
        for &call in DENIED {
            assert_eq!(verdict(ARCH, call as u32), eperm, "{call}");
            if let Some(bit) = X32_SYSCALL_BIT {
                assert_eq!(verdict(ARCH, call as u32 | bit), enosys, "x32 {call}");
            }
        }
        for call in [libc::SYS_read, libc::SYS_write, libc::SYS_getpid, libc::SYS_clone3, libc::SYS_execve] {
            assert_eq!(verdict(ARCH, call as u32), libc::SECCOMP_RET_ALLOW, "{call}");
            if let Some(bit) = X32_SYSCALL_BIT {
                assert_eq!(verdict(ARCH, call as u32 | bit), enosys, "x32 {call}");
            }
        }
        // i386 (`int 0x80`), whose numbers differ: getpid is 20 there.
        assert_eq!(verdict(0x4000_0003, 20), enosys);
    }

    /// In a forked child: no_new_privs, the filter, then a refused call, an allowed one, and the
    /// refused one by the x32 ABI. The program is made before the fork: the child of this threaded
    /// process must not allocate.
    #[test]
    fn the_filter_refuses_the_listed_calls_and_their_x32_forms_and_allows_the_rest() {
        let program = program();
        // SAFETY: the child makes raw system calls only and ends with _exit; the parent waits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", io::Error::last_os_error());
        if pid == 0 {
            let errno = || io::Error::last_os_error().raw_os_error().unwrap_or(0);
            let code = (|| {
                // SAFETY: prctl and raw system calls with constant arguments.
                unsafe {
                    if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || apply(&program).is_err() {
                        return 10;
                    }
                    if libc::syscall(libc::SYS_keyctl, 0, 0) != -1 || errno() != libc::EPERM {
                        return 11;
                    }
                    if libc::syscall(libc::SYS_getpid) <= 0 {
                        return 12;
                    }
                    if let Some(bit) = X32_SYSCALL_BIT
                        && (libc::syscall(libc::SYS_keyctl | libc::c_long::from(bit), 0, 0) != -1
                            || errno() != libc::ENOSYS)
                    {
                        return 13;
                    }
                }
                0
            })();
            // SAFETY: ends the child without running the test harness's exit handlers.
            unsafe { libc::_exit(code) }
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status), "{status:#x}");
        assert_eq!(libc::WEXITSTATUS(status), 0, "10: not installed, 11: keyctl allowed, 12: getpid refused, 13: x32");
    }
}
