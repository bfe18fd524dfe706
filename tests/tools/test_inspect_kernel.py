"""tools/inspect_kernel.py: the SASS classes count local-memory spill traffic (LDL / STL) overall and per loop
body, and ptxas's -v report is read per function (registers, stack frame, spill bytes)."""
from __future__ import annotations

import pytest

# a kernel that spills before its loop and reloads inside it (cuobjdump -sass layout)
SASS = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;                      /* 0x00000a0000017a02 */
        /*0010*/                   STL.64 [R1+0x10], R28 ;                     /* 0x0000101c01007387 */
        /*0020*/                   STL [R1+0x18], R9 ;                         /* 0x0000180901007387 */
        /*0030*/                   LDL.64 R76, [R1+0x10] ;                     /* 0x00001000014c7983 */
        /*0040*/               @P4 LDG.E.128 R92, desc[UR16][R76.64] ;         /* 0x00000010445c4981 */
        /*0050*/               @P1 LDG.E R11, desc[UR16][R86.64] ;             /* 0x00000010560b1981 */
        /*0060*/                   FFMA R2, R92, R11, R2 ;                     /* 0x0000000b5c027223 */
        /*0070*/               @P5 BRA 0x30 ;                                  /* 0xffffffbc00cc5947 */
        /*0080*/                   EXIT ;                                      /* 0x000000000000794d */
"""

LOG = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'conv_direct_wpack_kernel' for 'sm_90a'
ptxas info    : Function properties for conv_direct_wpack_kernel
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers
ptxas info    : Compile time = 12.161 ms
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'conv_roll_fwd_s1_kernel' for 'sm_90a'
ptxas info    : Function properties for conv_roll_fwd_s1_kernel
    344 bytes stack frame, 340 bytes spill stores, 340 bytes spill loads
ptxas info    : Used 255 registers, used 0 barriers, 344 bytes cumulative stack size
"""


@pytest.fixture(scope="module")
def ik(load_script):
    return load_script("tools/inspect_kernel.py")


def test_histogram_counts_spill_traffic(ik):
    counts = ik.histogram(SASS)
    assert (counts["STL"], counts["LDL"]) == (2, 1)
    assert (counts["LDG"], counts["LDG.128"], counts["FFMA"], counts["total"]) == (2, 1, 1, 9)


def test_loop_body_holds_the_reload(ik):
    [(length, body)] = ik.loops(SASS)
    assert length == 5
    assert (body["LDL"], body["STL"], body["LDG"]) == (1, 0, 2)


def test_ptxas_report_per_function(ik):
    report = ik.ptxas_report(LOG)
    assert report["conv_direct_wpack_kernel"] == {"stack_frame": 0, "spill_stores": 0, "spill_loads": 0,
                                                  "registers": 32}
    assert report["conv_roll_fwd_s1_kernel"] == {"stack_frame": 344, "spill_stores": 340, "spill_loads": 340,
                                                 "registers": 255}
