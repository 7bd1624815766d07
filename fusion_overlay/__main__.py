import sys

from fusion_overlay.overlay import main

sys.exit(main())
