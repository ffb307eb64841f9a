from medhelm.cli import main

raise SystemExit(main())
