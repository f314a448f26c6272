"""Where the checkout is, for tests in any folder of tests/."""

import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# packaging/build-rpm.sh's bound in the tests: a hang bound, not a time it should take (8 s idle
# here; a fresh-clone CI run with the VM test beside the suite took longer than the 180 s once
# allowed).
BUILD_RPM_BOUND = 900
